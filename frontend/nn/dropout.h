// Dropout: zeroes each element with probability `rate` in train mode and
// scales the rest by 1/(1-rate); the identity in predict mode (Gluon's nn.Dropout).
//
//   net.add(nn::Dense(256, "relu"), nn::Dropout(0.5), nn::Dense(10));
//   { autograd::Record r; y = net(x); }   // train mode: dropout applies
//   y = net(x);                           // predict mode: values pass unchanged
//
// `axes` share one mask value along those axes (variational dropout). The
// mode is autograd::is_training(): on inside autograd::Record (or
// autograd::TrainMode), off otherwise. Masks come from nd::dropout's stream
// (seed it with nd::dropout_seed).
#pragma once

#include "frontend/nn/block.h"
#include "ir/attrs.h"

namespace kiln::nn {

class Dropout : public HybridBlock {
 public:
  // ValueError unless 0 <= rate < 1.
  explicit Dropout(double rate = 0.5, IntTuple axes = {});
  NDArray forward(const NDArray& x) override;
  std::string to_string() const override;  // "Dropout(p = 0.5, axes=())"
  double rate() const { return rate_; }

 private:
  double rate_;
  IntTuple axes_;
};

}  // namespace kiln::nn
