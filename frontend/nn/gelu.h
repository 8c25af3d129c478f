// GELU: the Gaussian error linear unit as a block (Gluon 2's nn.GELU,
// PyTorch's nn.GELU), in the exact erf form or the tanh approximation.
//
//   net.add(nn::Dense(1024), nn::GELU());          // x Phi(x)
//   net.add(nn::Dense(1024), nn::GELU("tanh"));    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//
// approximation: "erf" (or PyTorch's "none") or "tanh"; anything else throws
// ValueError at construction. Runs MXNet's LeakyReLU op with act_type "gelu"
// or "gelu_tanh" (MXNet 2's spelling), so it exports as MXNet writes it.
// Prints "GELU(approximation=erf)" or "GELU(approximation=tanh)".
#pragma once

#include <string>

#include "frontend/nn/block.h"
#include "ir/ops/nn.h"

namespace kiln::nn {

class GELU : public HybridBlock {
 public:
  explicit GELU(const std::string& approximation = "erf");
  NDArray forward(const NDArray& x) override;
  std::string to_string() const override;
  LeakyType act_type() const { return act_; }  // kGelu or kGeluTanh

 private:
  LeakyType act_;
};

}  // namespace kiln::nn
