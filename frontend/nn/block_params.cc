// Block::save_parameters / load_parameters: a block's parameters in MXNet's
// NDArray-list file (frontend/formats/mxnet/params_io.h), by structural name.
#include <map>

#include <fmt/ranges.h>

#include "frontend/formats/mxnet/params_io.h"
#include "frontend/nn/block.h"

namespace kiln::nn {


void Block::save_parameters(const std::string& path) const {
  NamedArrays arrays;
  for (auto& [name, p] : collect_params()) {
    Parameter q = p;
    q.set_name(name);
    arrays.emplace_back(name, q.list_data().front().detach());  // copies are equal: the first
  }
  mxnet::save_ndarrays(path, arrays);
}

void Block::load_parameters(const std::string& path, Device device, bool allow_missing, bool ignore_extra) {
  ParameterDict params = collect_params();
  std::map<std::string, NDArray, std::less<>> loaded;
  std::vector<std::string> duplicates;
  for (auto& [raw, a] : mxnet::load_ndarrays(path)) {
    KILN_CHECK(!raw.empty(), ValueError,
               "load_parameters({}): the file holds unnamed arrays (a list save); parameters load by name", path);
    std::string name = raw.starts_with("arg:") || raw.starts_with("aux:") ? raw.substr(4) : raw;
    if (!loaded.emplace(name, a).second) duplicates.push_back(name);
  }
  std::vector<std::string> missing, extra, mismatched;
  for (auto& [name, p] : params) {
    auto it = loaded.find(name);
    if (it == loaded.end()) {
      if (!allow_missing) missing.push_back(name);
      continue;
    }
    const NDArray& a = it->second;
    bool shape_ok = !a.is_none() && a.ndim() == p.shape().ndim();
    for (int i = 0; shape_ok && i < a.ndim(); ++i) shape_ok = p.shape()[i] == 0 || p.shape()[i] == a.shape()[i];
    if (!shape_ok) {
      mismatched.push_back(fmt::format("{} (expected shape {}, file has {})", name, p.shape(),
                                       a.is_none() ? std::string("none") : a.shape().to_string()));
    } else if (a.dtype() != p.dtype()) {
      mismatched.push_back(fmt::format("{} (expected dtype {}, file has {})", name, p.dtype(), a.dtype()));
    }
  }
  if (!ignore_extra) {
    for (auto& [name, _] : loaded) {
      if (!params.contains(name)) extra.push_back(name);
    }
  }
  if (!missing.empty() || !extra.empty() || !mismatched.empty() || !duplicates.empty()) {
    std::vector<std::string> parts;
    if (!missing.empty()) {
      parts.push_back(fmt::format("{} missing from the file: {} (allow_missing=true skips them)", missing.size(),
                                  fmt::join(missing, ", ")));
    }
    if (!extra.empty()) {
      parts.push_back(fmt::format("{} extra in the file (not in the block): {} (ignore_extra=true skips them)",
                                  extra.size(), fmt::join(extra, ", ")));
    }
    if (!mismatched.empty()) {
      parts.push_back(fmt::format("{} mis-shaped: {}", mismatched.size(), fmt::join(mismatched, ", ")));
    }
    if (!duplicates.empty()) {
      parts.push_back(fmt::format("{} repeated in the file: {}", duplicates.size(), fmt::join(duplicates, ", ")));
    }
    throw ValueError(fmt::format("load_parameters({}): {}", path, fmt::join(parts, "; ")));
  }
  for (auto& [name, p] : params) {
    auto it = loaded.find(name);
    if (it == loaded.end()) continue;
    Parameter q = p;
    q.set_name(name);
    q.set_data(it->second, {device});
  }
}

}  // namespace kiln::nn
