#include "frontend/nn/concurrent.h"

#include "frontend/nd_matrix.h"

namespace kiln::nn::detail {

NDArray concurrent_forward(const Block& container, const NDArray& x, int axis) {
  const auto& children = container.children();
  KILN_CHECK(!children.empty(), ValueError, "{}: no children to run (add some first)", container.type_name());
  std::vector<NDArray> outs;
  outs.reserve(children.size());
  for (auto& [_, c] : children) outs.push_back((*c)(x));
  return nd::concat(outs, axis);
}

}  // namespace kiln::nn::detail
