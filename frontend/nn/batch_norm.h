// BatchNorm: batch normalization over the channel axis (Gluon's nn.BatchNorm;
// the BatchNorm op).
//
//   net.add(nn::Conv2D(16, 3), nn::BatchNorm(), nn::Activation("relu"));
//   { autograd::Record r; y = net(x); }   // train: batch statistics; running stats updated
//   y = net(x);                           // predict: the running statistics
//
// Parameters: "gamma" and "beta" [C] (learned; grad_req null when `scale` /
// `center` is off: gamma then stays 1, beta 0), "running_mean" and
// "running_var" [C] (aux states, initialized to 0 and 1). C (in_channels) is
// inferred from the input's `axis` at the first call when 0.
//
// Train mode (autograd::is_training(), as inside autograd::Record) and not
// use_global_stats: out = gamma * (x - mean) / sqrt(var + epsilon) + beta with
// the batch's mean and biased variance per channel, and running = running *
// momentum + batch * (1 - momentum). Otherwise the running statistics are used.
// The op runs with fix_gamma = !scale (Gluon's semantics).
//
// Prints as Gluon: "BatchNorm(axis=1, eps=1e-05, momentum=0.9, fix_gamma=False,
// use_global_stats=False, in_channels=16)".
#pragma once

#include "frontend/nn/block.h"

namespace kiln::nn {

class BatchNorm : public HybridBlock {
 public:
  // ValueError for epsilon <= 0, momentum outside [0, 1] or in_channels < 0.
  explicit BatchNorm(int axis = 1, double momentum = 0.9, double epsilon = 1e-5, bool center = true, bool scale = true,
                     bool use_global_stats = false, int64_t in_channels = 0,
                     init::Initializer beta_initializer = init::Zero(),
                     init::Initializer gamma_initializer = init::One(),
                     init::Initializer running_mean_initializer = init::Zero(),
                     init::Initializer running_variance_initializer = init::One());

  NDArray forward(const NDArray& x) override;
  // gamma, beta and the running statistics stay float32 (BatchNorm keeps
  // them so for 16-bit data: ir/ops/amp_policy.cc).
  void cast(DType) override {}
  std::string to_string() const override;

  Parameter gamma() const { return gamma_; }
  Parameter beta() const { return beta_; }
  Parameter running_mean() const { return running_mean_; }
  Parameter running_var() const { return running_var_; }

 protected:
  // Completes the parameters' shapes from `x` at the first call.
  void infer_channels(const NDArray& x);

  int axis_;
  double momentum_, epsilon_;
  bool scale_, use_global_stats_;
  Parameter gamma_, beta_, running_mean_, running_var_;
};

}  // namespace kiln::nn
