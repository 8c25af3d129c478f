// Conv2D: 2-D convolution over NCHW input (Gluon's nn.Conv2D; the Convolution op).
//
//   nn::Conv2D conv(16, 3, 1, 1, 1, 1, "relu");   // 3x3, stride 1, pad 1; in_channels inferred
//   nn::Conv2D wide(8, {1, 7}, 1, {0, 3});        // a 1x7 kernel
//   conv.initialize(init::Xavier());
//   NDArray y = conv(nd::ones({2, 3, 28, 28}));   // [2,16,28,28]
//
// Parameters: "weight" [channels, in_channels / groups, kh, kw], "bias"
// [channels] (absent without use_bias). in_channels 0 is inferred from the
// input's axis 1 at the first call (it must divide by `groups`). `activation`
// as in Dense. Prints as Gluon: "Conv2D(3 -> 16, kernel_size=(3, 3),
// stride=(1, 1), padding=(1, 1), Activation(relu))".
#pragma once

#include <optional>
#include <string>

#include "frontend/nn/block.h"
#include "ir/ops/nn.h"

namespace kiln::nn {

// A size per spatial axis of a 2-D window: one int for both, or {h, w}.
struct Int2 {
  int64_t h = 0, w = 0;
  Int2(int64_t both) : h(both), w(both) {}  // NOLINT: implicit, as Gluon's int-or-tuple
  Int2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  Shape shape() const { return Shape{h, w}; }
  bool operator==(const Int2&) const = default;
};

class Conv2D : public HybridBlock {
 public:
  // ValueError for non-positive channels, kernel, strides, dilation or groups,
  // negative padding, or an unknown activation.
  Conv2D(int64_t channels, Int2 kernel_size, Int2 strides = 1, Int2 padding = 0, Int2 dilation = 1, int64_t groups = 1,
         std::string activation = "", bool use_bias = true, int64_t in_channels = 0,
         std::optional<init::Initializer> weight_initializer = std::nullopt,
         init::Initializer bias_initializer = init::Zero());

  NDArray forward(const NDArray& x) override;
  std::string to_string() const override;

  Parameter weight() const { return weight_; }
  Parameter bias() const { return bias_; }  // none without use_bias

 private:
  int64_t channels_, groups_;
  Int2 kernel_, strides_, padding_, dilation_;
  std::optional<ActType> act_;
  Parameter weight_, bias_;
};

}  // namespace kiln::nn
