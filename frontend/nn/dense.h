// Dense: a fully connected layer, out = act(x . weight^T + bias) (Gluon's nn.Dense).
//
//   nn::Dense fc(256, "relu");               // in_units inferred at the first call
//   nn::Dense head(10, "", true, true, 256); // in_units given: initialized at initialize()
//   fc.initialize();
//   NDArray y = fc(nd::ones({32, 1, 28, 28}));   // flatten: [32, 784] -> [32, 256]
//
// Parameters: "weight" [units, in_units], "bias" [units] (absent without
// use_bias). With `flatten`, an input [N, d1, ...] is used as [N, d1*...];
// otherwise the last axis is in_units and the leading axes are kept. Runs the
// FullyConnected op and then, if `activation` is set ("relu", "sigmoid",
// "tanh", "softrelu", "softsign"), the Activation op. The weight's own
// initializer defaults to none (the one given to initialize() applies); the
// bias's to zeros.
//
// Prints as Gluon: "Dense(784 -> 256, Activation(relu))", "Dense(None -> 10, linear)".
#pragma once

#include <optional>
#include <string>

#include "frontend/nn/block.h"
#include "ir/ops/nn.h"

namespace kiln::nn {

class Dense : public HybridBlock {
 public:
  // ValueError for units < 1, in_units < 0 or an unknown activation.
  explicit Dense(int64_t units, std::string activation = "", bool use_bias = true, bool flatten = true,
                 int64_t in_units = 0, std::optional<init::Initializer> weight_initializer = std::nullopt,
                 init::Initializer bias_initializer = init::Zero(), DType dtype = DType::kFloat32);

  NDArray forward(const NDArray& x) override;
  std::string to_string() const override;

  int64_t units() const { return units_; }
  Parameter weight() const { return weight_; }
  Parameter bias() const { return bias_; }  // none without use_bias

 private:
  int64_t units_;
  std::optional<ActType> act_;
  bool flatten_;
  Parameter weight_, bias_;
};

}  // namespace kiln::nn
