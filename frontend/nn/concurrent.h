// Concurrent and HybridConcurrent: every child runs on the same input and the
// outputs are concatenated along `axis` (Gluon's contrib Concurrent; the
// branches of an Inception block).
//
//   nn::HybridConcurrent branches(1);
//   branches.add(nn::Conv2D(16, 1), nn::Conv2D(8, 3, 1, 1));
//   NDArray y = branches(x);      // x [N,C,H,W] -> [N,24,H,W]
//
// Children are named "0", "1", ... as in Sequential. With no children, the
// call throws ValueError.
#pragma once

#include "frontend/nn/sequential.h"

namespace kiln::nn {

namespace detail {
NDArray concurrent_forward(const Block& container, const NDArray& x, int axis);
}

class Concurrent : public ContainerMixin<Block> {
 public:
  explicit Concurrent(int axis = -1) : axis_(axis) {}
  NDArray forward(const NDArray& x) override { return detail::concurrent_forward(*this, x, axis_); }
  int axis() const { return axis_; }

 private:
  int axis_;
};

class HybridConcurrent : public ContainerMixin<HybridBlock> {
 public:
  explicit HybridConcurrent(int axis = -1) : axis_(axis) {}
  NDArray forward(const NDArray& x) override { return detail::concurrent_forward(*this, x, axis_); }
  int axis() const { return axis_; }

 private:
  int axis_;
};

}  // namespace kiln::nn
