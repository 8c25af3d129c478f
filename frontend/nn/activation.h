// Activation: an elementwise nonlinearity as a block (Gluon's nn.Activation).
//
//   net.add(nn::Dense(64), nn::Activation("tanh"));
//   std::cout << nn::Activation("relu");   // Activation(relu)
//
// act_type: "relu", "sigmoid", "tanh", "softrelu" (log(1 + e^x)), "softsign"
// (x / (1 + |x|)); anything else throws ValueError at construction.
#pragma once

#include <string>

#include "frontend/nn/block.h"
#include "ir/ops/nn.h"

namespace kiln::nn {

class Activation : public HybridBlock {
 public:
  explicit Activation(const std::string& act_type);
  NDArray forward(const NDArray& x) override;
  std::string to_string() const override;
  ActType act_type() const { return act_; }

 private:
  ActType act_;
};

}  // namespace kiln::nn
