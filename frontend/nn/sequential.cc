#include "frontend/nn/sequential.h"

namespace kiln::nn::detail {

NDArray chain_forward(const std::vector<Block::Child>& children, const NDArray& x) {
  NDArray y = x;
  for (auto& [_, c] : children) y = (*c)(y);
  return y;
}

std::vector<NDArray> chain_forward(const std::vector<Block::Child>& children, std::span<const NDArray> xs) {
  std::vector<NDArray> ys(xs.begin(), xs.end());
  for (auto& [_, c] : children) ys = (*c)(std::span<const NDArray>(ys));
  return ys;
}

Block& child_at(const Block& container, size_t i) {
  const auto& children = container.children();
  KILN_CHECK(i < children.size(), IndexError, "{}: index {} is out of range for {} children", container.type_name(), i,
             children.size());
  return *children[i].second;
}

}  // namespace kiln::nn::detail
