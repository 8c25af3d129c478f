// Attributes of the conv family (Convolution, Pooling, BatchNorm and their
// backward ops) and the window geometry shared by inference and kernels.
//
//   ConvolutionAttrs c{.kernel = {3, 3}, .pad = {1, 1}, .num_filter = 64};
//   WindowGeometry g = convolution_geometry(c, Shape{8, 3, 28, 28});   // g.out == {28, 28}
//   PoolingAttrs p{.kernel = {2, 2}, .pool_type = "avg", .stride = {2, 2}};
//   pooling_geometry(p, Shape{8, 3, 5, 7}).out == {2, 3}
//
// Names, defaults and string forms follow MXNet, so its JSON files load:
// Convolution's `stride`/`dilate`/`pad` default to 1s/1s/0s when empty, and
// BatchNorm defaults to eps 1e-3 and fix_gamma true. Layouts are channel-first
// (NCW, NCHW, NCDHW) with 1 to 3 spatial axes; arrays are float32.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "ir/attrs.h"

namespace kiln {

// Convolution(data, weight[, bias]): weight is [num_filter, C / num_group, k...];
// bias (absent when no_bias) is [num_filter]. `workspace`, `cudnn_tune` and
// `cudnn_off` are accepted for MXNet files and ignored.
struct ConvolutionAttrs {
  Shape kernel;
  Shape stride;  // empty: 1 per spatial axis
  Shape dilate;  // empty: 1 per spatial axis
  Shape pad;     // empty: 0 per spatial axis (both sides)
  int num_filter = 0;
  int num_group = 1;
  int64_t workspace = 1024;
  bool no_bias = false;
  std::optional<std::string> cudnn_tune;
  bool cudnn_off = false;
  std::optional<std::string> layout;
  template <typename V>
  void fields(V& v) {
    v("kernel", kernel, kRequired);
    v("stride", stride);
    v("dilate", dilate);
    v("pad", pad);
    v("num_filter", num_filter, kRequired);
    v("num_group", num_group);
    v("workspace", workspace);
    v("no_bias", no_bias);
    v("cudnn_tune", cudnn_tune);
    v("cudnn_off", cudnn_off);
    v("layout", layout);
  }
};

// _backward_Convolution_data(out_grad, weight) -> d_data of shape `data_shape`
// (the forward's data shape: with strides, out_grad alone does not fix it).
struct ConvolutionBackwardDataAttrs : ConvolutionAttrs {
  Shape data_shape;
  template <typename V>
  void fields(V& v) {
    ConvolutionAttrs::fields(v);
    v("data_shape", data_shape, kRequired);
  }
};

// Pooling(data). pool_type: "max", "avg", "sum" ("lp" is not supported).
// pooling_convention: "valid" (floor) or "full" (ceil; windows may hang over
// the right padding, and avg then divides by the part inside the padded input,
// as MXNet's native kernel does). "same" is MXNet's 1-D-only convention and is
// not supported. count_include_pad None means true. global_pool pools each
// whole plane (kernel, stride, dilate and pad are ignored). `dilate` (a Kiln
// extension; MXNet's Pooling has none, and files that omit it load as before)
// spaces the window's taps as Convolution's does; above 1 it is supported
// for max pooling only (NotSupported otherwise), as ONNX's MaxPool has it.
struct PoolingAttrs {
  Shape kernel;
  std::string pool_type = "max";
  bool global_pool = false;
  bool cudnn_off = false;
  std::string pooling_convention = "valid";
  Shape stride;  // empty: 1 per spatial axis
  Shape pad;     // empty: 0 per spatial axis
  Shape dilate;  // empty: 1 per spatial axis
  std::optional<int> p_value;
  std::optional<bool> count_include_pad;
  std::optional<std::string> layout;
  template <typename V>
  void fields(V& v) {
    v("kernel", kernel);
    v("pool_type", pool_type);
    v("global_pool", global_pool);
    v("cudnn_off", cudnn_off);
    v("pooling_convention", pooling_convention);
    v("stride", stride);
    v("pad", pad);
    v("dilate", dilate);
    v("p_value", p_value);
    v("count_include_pad", count_include_pad);
    v("layout", layout);
  }
};

// BatchNorm(data, gamma, beta, moving_mean, moving_var) -> (out, mean, var);
// _backward_BatchNorm(out_grad, data, gamma, mean, var) -> (d_data, d_gamma, d_beta).
// Train mode (the call's is_train and not use_global_stats) normalizes with
// the batch mean and biased variance, returns them as outputs 1 and 2, and
// updates moving_mean/moving_var in place: moving = moving * momentum +
// batch * (1 - momentum). Otherwise the moving statistics normalize, and
// outputs 1 and 2 are copies of them. fix_gamma treats gamma as 1 (its
// gradient is 0). `axis` is the channel axis (any axis).
struct BatchNormAttrs {
  double eps = 1e-3;
  float momentum = 0.9f;
  bool fix_gamma = true;
  bool use_global_stats = false;
  bool output_mean_var = false;
  int axis = 1;
  bool cudnn_off = false;
  std::optional<float> min_calib_range;  // quantization (accepted, ignored)
  std::optional<float> max_calib_range;
  template <typename V>
  void fields(V& v) {
    v("eps", eps);
    v("momentum", momentum);
    v("fix_gamma", fix_gamma);
    v("use_global_stats", use_global_stats);
    v("output_mean_var", output_mean_var);
    v("axis", axis);
    v("cudnn_off", cudnn_off);
    v("min_calib_range", min_calib_range);
    v("max_calib_range", max_calib_range);
  }
};

// A sliding window over `nsp` spatial axes, resolved against an input shape.
// Per spatial axis i: out[i] = (in[i] + pad_l[i] + pad_r[i] - (kernel[i] - 1)
// * dilate[i] - 1) / stride[i] + 1. pad_r exceeds pad_l only for pooling's
// "full" convention (the ceil rounding).
struct WindowGeometry {
  static constexpr int kMaxSpatial = 3;
  int nsp = 0;
  std::array<int64_t, kMaxSpatial> kernel{}, stride{}, dilate{}, pad_l{}, pad_r{}, in{}, out{};
  int64_t kernel_size() const;  // product of kernel
  Shape out_shape(int64_t batch, int64_t channels) const;
};

enum class PoolType { kMax, kAvg, kSum };

// Checks `attrs` against data (ValueError/ShapeError/NotSupported naming the
// values) and resolves the window. The messages do not name the op: inference
// callers prefix it.
WindowGeometry convolution_geometry(const ConvolutionAttrs& attrs, const Shape& data);
WindowGeometry pooling_geometry(const PoolingAttrs& attrs, const Shape& data);
PoolType pool_type(const PoolingAttrs& attrs);
bool pool_count_include_pad(const PoolingAttrs& attrs);

// BatchNorm's data seen as [outer, channels, inner] around the (normalized) axis.
struct BatchNormDims {
  int axis = 1;
  int64_t outer = 1, channels = 1, inner = 1;
};
BatchNormDims batch_norm_dims(const BatchNormAttrs& attrs, const Shape& data);

}  // namespace kiln
