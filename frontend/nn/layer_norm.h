// LayerNorm: normalization of each sample along one axis, with a learned
// scale and shift per position on that axis (Gluon's nn.LayerNorm; the
// LayerNorm op).
//
//   nn::LayerNorm norm;                       // last axis, epsilon 1e-5
//   norm.initialize();
//   NDArray y = norm(x);                      // x [N, T, C]: each (n, t) row normalized over C
//
// Parameters "gamma" (init One) and "beta" (init Zero), shape [C] with C
// (in_channels) inferred from the input's `axis` at the first call when 0;
// grad_req null when `scale` / `center` is off (gamma then stays 1, beta 0).
// out = gamma * (x - mean) / sqrt(var + epsilon) + beta with the biased
// variance; the same in train and predict mode (no running statistics).
//
// Prints as Gluon: "LayerNorm(in_channels=16, eps=1e-05, axis=-1, center=True, scale=True)".
#pragma once

#include "frontend/nn/block.h"

namespace kiln::nn {

class LayerNorm : public HybridBlock {
 public:
  // ValueError for epsilon < 0 or in_channels < 0.
  explicit LayerNorm(int axis = -1, double epsilon = 1e-5, bool center = true, bool scale = true,
                     int64_t in_channels = 0, init::Initializer beta_initializer = init::Zero(),
                     init::Initializer gamma_initializer = init::One());

  // ShapeError when x's length on `axis` differs from in_channels.
  NDArray forward(const NDArray& x) override;
  std::string to_string() const override;

  Parameter gamma() const { return gamma_; }
  Parameter beta() const { return beta_; }

 private:
  int axis_;
  double epsilon_;
  bool center_, scale_;
  Parameter gamma_, beta_;
};

}  // namespace kiln::nn
