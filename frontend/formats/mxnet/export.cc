#include "frontend/formats/mxnet/export.h"

#include <fstream>
#include <set>

#include <fmt/ranges.h>

namespace kiln::mxnet {

NamedArrays prefixed_params(const ir::Graph& g, const ArrayMap& values) {
  NamedArrays out;
  std::vector<std::string> missing;
  for (const ir::Node& n : g.nodes()) {
    if (n.kind != ir::NodeKind::kParam && n.kind != ir::NodeKind::kAux && n.kind != ir::NodeKind::kConst) continue;
    auto it = values.find(n.name);
    if (it == values.end()) {
      missing.push_back(n.name);
      continue;
    }
    out.emplace_back((n.kind == ir::NodeKind::kAux ? "aux:" : "arg:") + n.name, it->second);
  }
  KILN_CHECK(missing.empty(), ValueError, "export: no value for {} parameter(s): {}", missing.size(),
             fmt::join(missing, ", "));
  return out;
}

void save_graph_params(const std::string& path, const ir::Graph& g, const ArrayMap& values) {
  save_ndarrays(path, prefixed_params(g, values));
}

ArrayMap match_symbol_params(NamedArrays arrays, std::string_view source, const Symbol& symbol,
                             std::span<const std::string> input_names) {
  std::set<std::string, std::less<>> inputs(input_names.begin(), input_names.end());
  ArrayMap out;
  std::vector<std::string> unknown, as_input, wrong_kind, repeated, unnamed;
  for (auto& [raw, a] : arrays) {
    if (raw.empty()) {
      unnamed.push_back(std::to_string(out.size() + unnamed.size()));
      continue;
    }
    bool arg = raw.starts_with("arg:"), aux = raw.starts_with("aux:");
    std::string name = arg || aux ? raw.substr(4) : raw;
    auto id = symbol.find(name);
    if (!id || !symbol.nodes[static_cast<size_t>(*id)].is_variable()) {
      unknown.push_back(raw);
      continue;
    }
    if (inputs.contains(name)) {
      as_input.push_back(raw);
      continue;
    }
    bool is_aux = symbol.nodes[static_cast<size_t>(*id)].is_aux;
    if ((arg && is_aux) || (aux && !is_aux)) {
      wrong_kind.push_back(fmt::format("{} (the graph has it as {})", raw, is_aux ? "aux" : "arg"));
      continue;
    }
    if (!out.emplace(name, std::move(a)).second) repeated.push_back(name);
  }
  std::vector<std::string> parts;
  if (!unknown.empty())
    parts.push_back(
        fmt::format("{} name(s) match no variable of the graph: {}", unknown.size(), fmt::join(unknown, ", ")));
  if (!as_input.empty())
    parts.push_back(
        fmt::format("{} name(s) are data inputs, not parameters: {}", as_input.size(), fmt::join(as_input, ", ")));
  if (!wrong_kind.empty())
    parts.push_back(fmt::format("{} with the wrong prefix: {}", wrong_kind.size(), fmt::join(wrong_kind, ", ")));
  if (!repeated.empty()) parts.push_back(fmt::format("{} repeated: {}", repeated.size(), fmt::join(repeated, ", ")));
  if (!unnamed.empty())
    parts.push_back(fmt::format("{} unnamed array(s) (a list save; parameters load by name)", unnamed.size()));
  KILN_CHECK(parts.empty(), ValueError, "{}: {}", source, fmt::join(parts, "; "));
  return out;
}

ArrayMap load_symbol_params(const std::string& path, const Symbol& symbol,
                            std::span<const std::string> input_names) {
  return match_symbol_params(load_ndarrays(path), path, symbol, input_names);
}

void write_text_file(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(out.good(), IOError, "{}: cannot open for writing", path);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  KILN_CHECK(out.good(), IOError, "{}: write failed", path);
}

std::pair<std::string, std::string> export_graph(const std::string& prefix, int epoch, const ir::Graph& g,
                                                 const ArrayMap& values) {
  KILN_CHECK(epoch >= 0 && epoch <= 9999, ValueError, "export: epoch {} is not in [0, 9999]", epoch);
  std::string json_path = prefix + "-symbol.json";
  std::string params_path = fmt::format("{}-{:04d}.params", prefix, epoch);
  NamedArrays arrays = prefixed_params(g, values);  // checks before anything is written
  write_text_file(json_path, mxnet::to_json(g));
  save_ndarrays(params_path, arrays);
  return {json_path, params_path};
}

}  // namespace kiln::mxnet
