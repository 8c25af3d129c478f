#include "frontend/nn/conv2d.h"

#include "frontend/nd_conv.h"
#include "frontend/nd_nn.h"

namespace kiln::nn {

Conv2D::Conv2D(int64_t channels, Int2 kernel_size, Int2 strides, Int2 padding, Int2 dilation, int64_t groups,
               std::string activation, bool use_bias, int64_t in_channels,
               std::optional<init::Initializer> weight_initializer, init::Initializer bias_initializer)
    : channels_(channels),
      groups_(groups),
      kernel_(kernel_size),
      strides_(strides),
      padding_(padding),
      dilation_(dilation) {
  KILN_CHECK(channels >= 1 && groups >= 1, ValueError, "Conv2D: channels ({}) and groups ({}) must be >= 1", channels,
             groups);
  KILN_CHECK(channels % groups == 0, ValueError, "Conv2D: channels ({}) must be divisible by groups ({})", channels,
             groups);
  for (auto [what, v, min] : {std::tuple{"kernel_size", kernel_size, 1}, std::tuple{"strides", strides, 1},
                              std::tuple{"dilation", dilation, 1}, std::tuple{"padding", padding, 0}}) {
    KILN_CHECK(v.h >= min && v.w >= min, ValueError, "Conv2D: {} must be >= {}, got ({}, {})", what, min, v.h, v.w);
  }
  KILN_CHECK(in_channels >= 0 && in_channels % groups == 0, ValueError,
             "Conv2D: in_channels ({}) must be >= 0 (0: inferred) and divisible by groups ({})", in_channels, groups);
  if (!activation.empty()) act_ = parse_attr(activation, static_cast<ActType*>(nullptr));
  weight_ = register_parameter("weight", Shape{channels, in_channels / groups, kernel_.h, kernel_.w},
                               {.init = weight_initializer});
  if (use_bias) bias_ = register_parameter("bias", Shape{channels}, {.init = bias_initializer});
}

NDArray Conv2D::forward(const NDArray& x) {
  if (!weight_.shape_known()) {
    KILN_CHECK(x.ndim() == 4, ShapeError, "Conv2D: expected NCHW input (4 dims) to infer in_channels, got {}",
               x.shape());
    int64_t c = x.shape()[1];
    KILN_CHECK(c % groups_ == 0, ShapeError, "Conv2D: input channels {} (input {}) are not divisible by groups {}", c,
               x.shape(), groups_);
    weight_.complete_shape(Shape{channels_, c / groups_, kernel_.h, kernel_.w});
  }
  Device d = x.device();
  ConvolutionAttrs attrs{.kernel = kernel_.shape(),
                         .stride = strides_.shape(),
                         .dilate = dilation_.shape(),
                         .pad = padding_.shape(),
                         .num_filter = static_cast<int>(channels_),
                         .num_group = static_cast<int>(groups_),
                         .no_bias = bias_.is_none()};
  NDArray y = nd::convolution(x, weight_.data(d), bias_.is_none() ? NDArray() : bias_.data(d), attrs);
  return act_ ? nd::activation(y, *act_) : y;
}

std::string Conv2D::to_string() const {
  int64_t in = weight_.shape()[1] * groups_;
  std::string s = fmt::format("{}({} -> {}, kernel_size={}, stride={}", type_name(),
                              in == 0 ? std::string("None") : std::to_string(in), channels_,
                              kernel_.shape().to_mxnet_string(), strides_.shape().to_mxnet_string());
  if (!(padding_ == Int2(0))) s += fmt::format(", padding={}", padding_.shape().to_mxnet_string());
  if (!(dilation_ == Int2(1))) s += fmt::format(", dilation={}", dilation_.shape().to_mxnet_string());
  if (groups_ != 1) s += fmt::format(", groups={}", groups_);
  if (bias_.is_none()) s += ", bias=False";
  if (act_) s += fmt::format(", Activation({})", print_attr(*act_));
  return s + ")";
}

}  // namespace kiln::nn
