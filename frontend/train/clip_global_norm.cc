#include "frontend/train/clip_global_norm.h"

#include <cmath>

#include "frontend/nd_reduce.h"

namespace kiln {

double clip_global_norm(std::span<const NDArray> arrays, double max_norm, bool check_isfinite,
                        std::span<const std::string> names) {
  KILN_CHECK(max_norm > 0, ValueError, "clip_global_norm: max_norm must be > 0, got {}", max_norm);
  std::vector<NDArray> norms;  // queued on every device before the first wait
  for (size_t i = 0; i < arrays.size(); ++i) {
    KILN_CHECK(!arrays[i].is_none() && is_floating(arrays[i].dtype()), TypeError,
               "clip_global_norm: array {} must be a float array, got {}", i,
               arrays[i].is_none() ? std::string("none") : std::string(dtype_name(arrays[i].dtype())));
    norms.push_back(nd::norm(arrays[i]));
  }
  double sum_sq = 0;
  std::vector<double> each;
  for (const NDArray& n : norms) {
    each.push_back(n.item<double>());
    sum_sq += each.back() * each.back();
  }
  const double norm = std::sqrt(sum_sq);
  if (check_isfinite && !std::isfinite(norm)) {
    size_t bad = 0;
    while (bad < each.size() && std::isfinite(each[bad])) ++bad;
    throw ValueError(
        bad < each.size()
            ? fmt::format(
                  "clip_global_norm: the global norm is {}: {} (shape {}) has norm {}; the arrays were left "
                  "unchanged",
                  norm, names.size() == arrays.size() ? fmt::format("'{}'", names[bad]) : fmt::format("array {}", bad),
                  arrays[bad].shape(), each[bad])
            : fmt::format("clip_global_norm: the global norm overflows ({}); the arrays were left unchanged", norm));
  }
  if (norm > max_norm) {
    const double scale = max_norm / (norm + 1e-8);
    for (NDArray a : arrays) a *= scale;
  }
  return norm;
}

}  // namespace kiln
