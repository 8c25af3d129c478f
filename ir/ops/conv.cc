#include "ir/ops/conv.h"

#include <cmath>

#include "ir/ops/conv_layout.h"

#include "ir/grad.h"
#include "ir/op.h"
#include "ir/ops/reduce.h"

namespace kiln {

// ---- geometry

int64_t WindowGeometry::kernel_size() const {
  int64_t n = 1;
  for (int i = 0; i < nsp; ++i) n *= kernel[i];
  return n;
}

Shape WindowGeometry::out_shape(int64_t batch, int64_t channels) const {
  return window_out_shape(*this, batch, channels, false);
}

Shape window_out_shape(const WindowGeometry& g, int64_t batch, int64_t channels, bool last) {
  Shape s{batch};
  if (!last) s.push_back(channels);
  for (int i = 0; i < g.nsp; ++i) s.push_back(g.out[i]);
  if (last) s.push_back(channels);
  return s;
}

Shape convolution_weight_shape(const ConvolutionAttrs& a, const WindowGeometry& g, int64_t channels, bool last) {
  Shape w{a.num_filter};
  if (!last) w.push_back(channels / a.num_group);
  for (int i = 0; i < g.nsp; ++i) w.push_back(g.kernel[i]);
  if (last) w.push_back(channels / a.num_group);
  return w;
}

namespace {

constexpr std::array<std::string_view, 4> kLayouts = {"", "NCW", "NCHW", "NCDHW"};
constexpr std::array<std::string_view, 4> kChannelsLast = {"", "NWC", "NHWC", "NDHWC"};

// Fills `dst` from `given` (empty: `fallback` on every axis).
void resolve(std::array<int64_t, 3>& dst, const Shape& given, int nsp, int64_t fallback, int64_t min,
             const char* name) {
  KILN_CHECK(given.ndim() == 0 || given.ndim() == nsp, ValueError, "{}={} has {} values but kernel has {} axes",
             name, given.to_mxnet_string(), given.ndim(), nsp);
  for (int i = 0; i < nsp; ++i) {
    dst[i] = given.ndim() == 0 ? fallback : given[i];
    KILN_CHECK(dst[i] >= min, ValueError, "{}={} must be >= {} on every axis", name, given.to_mxnet_string(), min);
  }
}

// The offset of the first spatial axis in the data's shape (1 channel-last, 2 channel-first).
int check_layout(const std::optional<std::string>& layout, int nsp) {
  if (!layout || *layout == kLayouts[nsp]) return 2;
  KILN_CHECK(*layout == kChannelsLast[nsp], ValueError,
             "layout='{}' does not fit {} spatial axes: expected {} (channels first) or {} (channels last)", *layout,
             nsp, kLayouts[nsp], kChannelsLast[nsp]);
  return 1;
}

void check_spatial(int nsp, const Shape& data, const Shape& kernel) {
  KILN_CHECK(nsp >= 1, ValueError, "kernel must have 1 to 3 axes, got kernel={}", kernel.to_mxnet_string());
  KILN_CHECK(nsp <= WindowGeometry::kMaxSpatial, NotSupported,
             "kernel={} has {} axes; only 1-D, 2-D and 3-D windows are supported", kernel.to_mxnet_string(), nsp);
  KILN_CHECK(data.ndim() == nsp + 2, ShapeError,
             "kernel={} needs data with {} axes (batch, channel and {} spatial), got data {}",
             kernel.to_mxnet_string(), nsp + 2, nsp, data);
}

}  // namespace

WindowGeometry convolution_geometry(const ConvolutionAttrs& a, const Shape& data) {
  WindowGeometry g;
  g.nsp = a.kernel.ndim();
  check_spatial(g.nsp, data, a.kernel);
  const int first = check_layout(a.layout, g.nsp);
  resolve(g.kernel, a.kernel, g.nsp, 1, 1, "kernel");
  resolve(g.stride, a.stride, g.nsp, 1, 1, "stride");
  resolve(g.dilate, a.dilate, g.nsp, 1, 1, "dilate");
  resolve(g.pad_l, a.pad, g.nsp, 0, 0, "pad");
  g.pad_r = g.pad_l;
  KILN_CHECK(a.num_filter >= 1, ValueError, "num_filter must be >= 1, got {}", a.num_filter);
  KILN_CHECK(a.num_group >= 1, ValueError, "num_group must be >= 1, got {}", a.num_group);
  const int64_t channels = data_channels(data, first == 1);
  KILN_CHECK(channels % a.num_group == 0 && a.num_filter % a.num_group == 0, ShapeError,
             "num_group={} must divide both the data channels ({}, data {}) and num_filter ({})", a.num_group,
             channels, data, a.num_filter);
  for (int i = 0; i < g.nsp; ++i) {
    g.in[i] = data[i + first];
    int64_t span = (g.kernel[i] - 1) * g.dilate[i] + 1;
    int64_t padded = g.in[i] + 2 * g.pad_l[i];
    KILN_CHECK(span <= padded, ShapeError,
               "kernel={} (dilate={}) spans {} on spatial axis {}, larger than the input {} padded to {} (data {})",
               a.kernel.to_mxnet_string(), a.dilate.to_mxnet_string(), span, i, g.in[i], padded, data);
    g.out[i] = (padded - span) / g.stride[i] + 1;
  }
  return g;
}

PoolType pool_type(const PoolingAttrs& a) {
  if (a.pool_type == "max") return PoolType::kMax;
  if (a.pool_type == "avg") return PoolType::kAvg;
  if (a.pool_type == "sum") return PoolType::kSum;
  KILN_CHECK(a.pool_type != "lp", NotSupported, "pool_type='lp' (Lp pooling) is not supported");
  throw ValueError(fmt::format("pool_type='{}' is not one of max, avg, sum, lp", a.pool_type));
}

bool pool_count_include_pad(const PoolingAttrs& a) { return a.count_include_pad.value_or(true); }

WindowGeometry pooling_geometry(const PoolingAttrs& a, const Shape& data) {
  pool_type(a);  // validates
  const bool full = a.pooling_convention == "full";
  KILN_CHECK(a.pooling_convention != "same", NotSupported,
             "pooling_convention='same' (MXNet's 1-D max pooling convention) is not supported");
  KILN_CHECK(full || a.pooling_convention == "valid", ValueError,
             "pooling_convention='{}' is not one of valid, full, same", a.pooling_convention);
  WindowGeometry g;
  if (a.global_pool) {
    g.nsp = data.ndim() - 2;
    KILN_CHECK(g.nsp >= 1 && g.nsp <= WindowGeometry::kMaxSpatial, ShapeError,
               "global pooling needs data with 3 to 5 axes (batch, channel, spatial...), got data {}", data);
    const int first = check_layout(a.layout, g.nsp);
    for (int i = 0; i < g.nsp; ++i) {
      g.in[i] = g.kernel[i] = data[i + first];
      g.stride[i] = g.dilate[i] = g.out[i] = 1;
    }
    return g;
  }
  KILN_CHECK(a.kernel.ndim() > 0, ValueError, "kernel is required unless global_pool is true");
  g.nsp = a.kernel.ndim();
  check_spatial(g.nsp, data, a.kernel);
  const int first = check_layout(a.layout, g.nsp);
  resolve(g.kernel, a.kernel, g.nsp, 1, 1, "kernel");
  resolve(g.stride, a.stride, g.nsp, 1, 1, "stride");
  resolve(g.pad_l, a.pad, g.nsp, 0, 0, "pad");
  resolve(g.dilate, a.dilate, g.nsp, 1, 1, "dilate");
  for (int i = 0; i < g.nsp; ++i) {
    KILN_CHECK(g.dilate[i] == 1 || pool_type(a) == PoolType::kMax, NotSupported,
               "dilate={} with pool_type='{}': dilated windows are supported for max pooling only",
               a.dilate.to_mxnet_string(), a.pool_type);
    g.in[i] = data[i + first];
    const int64_t span = (g.kernel[i] - 1) * g.dilate[i] + 1;
    int64_t padded = g.in[i] + 2 * g.pad_l[i];
    KILN_CHECK(span <= padded, ShapeError,
               "kernel={} (dilate={}) spans {} on spatial axis {}, larger than the input {} padded to {} (data {})",
               a.kernel.to_mxnet_string(), a.dilate.to_mxnet_string(), span, i, g.in[i], padded, data);
    int64_t steps = padded - span;
    g.out[i] = 1 + (full ? (steps + g.stride[i] - 1) / g.stride[i] : steps / g.stride[i]);
    // Right padding that makes the last window fit exactly (ceil mode may need more than pad).
    g.pad_r[i] = std::max(g.pad_l[i], (g.out[i] - 1) * g.stride[i] + span - g.in[i] - g.pad_l[i]);
  }
  return g;
}

BatchNormDims batch_norm_dims(const BatchNormAttrs& a, const Shape& data) {
  KILN_CHECK(data.ndim() >= 1, ShapeError, "data must have at least one axis, got a scalar");
  BatchNormDims d;
  d.axis = normalize_axis(a.axis, data.ndim(), "BatchNorm axis");
  for (int i = 0; i < data.ndim(); ++i) {
    if (i < d.axis) d.outer *= data[i];
    if (i > d.axis) d.inner *= data[i];
  }
  d.channels = data[d.axis];
  return d;
}

namespace {

// ---- inference

// The first `count` inputs carry data: one dtype, float32, float16 or
// bfloat16 (16-bit floats compute in float32: runtime/kernel.h).
DType check_data_dtypes(std::span<const TensorType> in, size_t count) {
  const DType t = in[0].dtype;
  KILN_CHECK(t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBfloat16, TypeError,
             "input 0 is {}; expected float32, float16 or bfloat16", t);
  for (size_t i = 1; i < count && i < in.size(); ++i)
    KILN_CHECK(in[i].dtype == t, TypeError, "input {} is {} but input 0 is {}; cast one of them", i, in[i].dtype, t);
  return t;
}

// Scale, shift and statistics stay float32 whatever the data's dtype.
void check_float32_from(std::span<const TensorType> in, size_t first) {
  for (size_t i = first; i < in.size(); ++i)
    KILN_CHECK(in[i].dtype == DType::kFloat32, TypeError, "input {} is {}; channel vectors are float32", i,
               in[i].dtype);
}

void check_weight(const ConvolutionAttrs& a, const WindowGeometry& g, const Shape& data, const Shape& weight) {
  const bool last = channels_last(a.layout);
  Shape want = convolution_weight_shape(a, g, data_channels(data, last), last);
  KILN_CHECK(weight == want, ShapeError,
             "weight has shape {} but data {} with num_filter={}, num_group={}, kernel={} needs weight {}", weight,
             data, a.num_filter, a.num_group, a.kernel.to_mxnet_string(), want);
}

void infer_convolution(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<ConvolutionAttrs>();
  const size_t arity = a.no_bias ? 2 : 3;
  KILN_CHECK(in.size() == arity, ValueError, "expected {} inputs ({}) with no_bias={}, got {}", arity,
             a.no_bias ? "data, weight" : "data, weight, bias", print_attr(a.no_bias), in.size());
  const DType t = check_data_dtypes(in, in.size());
  WindowGeometry g = convolution_geometry(a, in[0].shape);
  check_weight(a, g, in[0].shape, in[1].shape);
  if (!a.no_bias)
    KILN_CHECK(in[2].shape == Shape{a.num_filter}, ShapeError, "bias has shape {} but num_filter={} needs [{}]",
               in[2].shape, a.num_filter, a.num_filter);
  out.push_back({window_out_shape(g, in[0].shape[0], a.num_filter, channels_last(a.layout)), t});
}

void check_out_grad(const Shape& out_grad, const Shape& want) {
  KILN_CHECK(out_grad == want, ShapeError, "out_grad has shape {} but the forward output is {}", out_grad, want);
}

// (out_grad, weight) -> d_data
void infer_convolution_backward_data(const OpAttrs& attrs, std::span<const TensorType> in,
                                     std::vector<TensorType>& out) {
  const auto& a = attrs.as<ConvolutionBackwardDataAttrs>();
  const DType t = check_data_dtypes(in, in.size());
  WindowGeometry g = convolution_geometry(a, a.data_shape);
  check_weight(a, g, a.data_shape, in[1].shape);
  check_out_grad(in[0].shape, window_out_shape(g, a.data_shape[0], a.num_filter, channels_last(a.layout)));
  out.push_back({a.data_shape, t});
}

// (out_grad, data) -> d_weight
void infer_convolution_backward_weight(const OpAttrs& attrs, std::span<const TensorType> in,
                                       std::vector<TensorType>& out) {
  const auto& a = attrs.as<ConvolutionAttrs>();
  const DType t = check_data_dtypes(in, in.size());
  WindowGeometry g = convolution_geometry(a, in[1].shape);
  const bool last = channels_last(a.layout);
  check_out_grad(in[0].shape, window_out_shape(g, in[1].shape[0], a.num_filter, last));
  out.push_back({convolution_weight_shape(a, g, data_channels(in[1].shape, last), last), t});
}

void infer_pooling(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const DType t = check_data_dtypes(in, in.size());
  const auto& a = attrs.as<PoolingAttrs>();
  WindowGeometry g = pooling_geometry(a, in[0].shape);
  const bool last = channels_last(a.layout);
  out.push_back({window_out_shape(g, in[0].shape[0], data_channels(in[0].shape, last), last), t});
}

// (out_grad, data, output) -> d_data
void infer_pooling_backward(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const DType t = check_data_dtypes(in, in.size());
  const auto& a = attrs.as<PoolingAttrs>();
  WindowGeometry g = pooling_geometry(a, in[1].shape);
  const bool last = channels_last(a.layout);
  Shape y = window_out_shape(g, in[1].shape[0], data_channels(in[1].shape, last), last);
  check_out_grad(in[0].shape, y);
  KILN_CHECK(in[2].shape == y, ShapeError, "output has shape {} but the forward output is {}", in[2].shape, y);
  out.push_back({in[1].shape, t});
}

void check_channel_vectors(std::span<const TensorType> in, size_t first, const BatchNormDims& d,
                           std::initializer_list<std::string_view> names) {
  size_t i = first;
  for (std::string_view name : names) {
    KILN_CHECK(in[i].shape == Shape{d.channels}, ShapeError,
               "{} has shape {} but data {} has {} channels on axis {} (needs [{}])", name, in[i].shape,
               in[0].shape, d.channels, d.axis, d.channels);
    ++i;
  }
}

void infer_batch_norm(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const DType t = check_data_dtypes(in, 1);
  check_float32_from(in, 1);
  BatchNormDims d = batch_norm_dims(attrs.as<BatchNormAttrs>(), in[0].shape);
  check_channel_vectors(in, 1, d, {"gamma", "beta", "moving_mean", "moving_var"});
  out.push_back({in[0].shape, t});
  out.push_back({Shape{d.channels}, DType::kFloat32});
  out.push_back({Shape{d.channels}, DType::kFloat32});
}

// (out_grad, data, gamma, mean, var) -> (d_data, d_gamma, d_beta)
void infer_batch_norm_backward(const OpAttrs& attrs, std::span<const TensorType> in,
                               std::vector<TensorType>& out) {
  const DType t = check_data_dtypes(in, 2);
  check_float32_from(in, 2);
  BatchNormDims d = batch_norm_dims(attrs.as<BatchNormAttrs>(), in[1].shape);
  check_out_grad(in[0].shape, in[1].shape);
  check_channel_vectors(in, 2, d, {"gamma", "mean", "var"});
  out.push_back({in[1].shape, t});
  out.push_back({Shape{d.channels}, DType::kFloat32});
  out.push_back({Shape{d.channels}, DType::kFloat32});
}

// ---- gradients

// Only what needs_grad asks for: the first layer's data needs no gradient.
void convolution_grad(GradBuilder& b, const GradArgs& args, std::span<GradValue> in_grads) {
  const auto& a = args.attrs.as<ConvolutionAttrs>();
  GradValue dy = args.out_grads[0];
  if (args.needs_grad[0]) {
    ConvolutionBackwardDataAttrs bd;
    static_cast<ConvolutionAttrs&>(bd) = a;
    bd.data_shape = b.type(args.inputs[0]).shape;
    in_grads[0] = b.op(OpId::kConvolutionBackwardData, {dy, args.inputs[1]}, OpAttrs::make(std::move(bd)));
  }
  if (args.needs_grad[1])
    in_grads[1] = b.op(OpId::kConvolutionBackwardWeight, {dy, args.inputs[0]}, args.attrs);
  if (!a.no_bias && args.needs_grad[2]) {
    ReduceAttrs sum;  // every axis but the channel axis
    const int ndim = b.type(dy).shape.ndim(), channel = channel_axis(ndim, channels_last(a.layout));
    sum.axis = IntTuple{};
    for (int i = 0; i < ndim; ++i)
      if (i != channel) sum.axis->push_back(i);
    in_grads[2] = b.op(OpId::kSum, {dy}, OpAttrs::make(std::move(sum)));
  }
}

void pooling_grad(GradBuilder& b, const GradArgs& args, std::span<GradValue> in_grads) {
  in_grads[0] = b.op(OpId::kPoolingBackward, {args.out_grads[0], args.inputs[0], args.outputs[0]}, args.attrs);
}

// Gradients reaching the mean and var outputs are ignored (as MXNet does).
// The backward kernel tells train from predict mode by its call's is_train,
// which autograd sets to the forward call's mode.
void batch_norm_grad(GradBuilder& b, const GradArgs& args, std::span<GradValue> in_grads) {
  if (args.out_grads[0].is_none() || (!args.needs_grad[0] && !args.needs_grad[1] && !args.needs_grad[2])) return;
  GradValue in[] = {args.out_grads[0], args.inputs[0], args.inputs[1], args.outputs[1], args.outputs[2]};
  std::vector<GradValue> g = b.apply(OpId::kBatchNormBackward, in, args.attrs);
  for (int i = 0; i < 3; ++i)
    if (args.needs_grad[i]) in_grads[i] = g[i];
}

OpDef& define(OpRegistry& r, OpId id, std::string_view doc, int num_inputs,
              std::vector<std::string_view> input_names, InferFn infer, ParseAttrsFn parse) {
  OpDef& d = r.define(id, doc);
  d.num_inputs = num_inputs;
  d.input_names = std::move(input_names);
  d.infer = infer;
  d.parse_attrs = parse;
  return d;
}

}  // namespace

void register_conv_ops(OpRegistry& r) {
  OpDef& conv = define(r, OpId::kConvolution, "N-D convolution of channel-first data with grouped filters.", -1,
                       {"data", "weight", "bias"}, infer_convolution, parse_attrs_as<ConvolutionAttrs>);
  conv.grad = convolution_grad;

  define(r, OpId::kConvolutionBackwardData, "Gradient of Convolution with respect to its data.", 2,
         {"out_grad", "weight"}, infer_convolution_backward_data, parse_attrs_as<ConvolutionBackwardDataAttrs>);
  define(r, OpId::kConvolutionBackwardWeight, "Gradient of Convolution with respect to its weight.", 2,
         {"out_grad", "data"}, infer_convolution_backward_weight, parse_attrs_as<ConvolutionAttrs>);

  OpDef& pool = define(r, OpId::kPooling, "Max, average or sum pooling over 1 to 3 spatial axes.", 1, {"data"},
                       infer_pooling, parse_attrs_as<PoolingAttrs>);
  pool.grad = pooling_grad;
  pool.grad_uses_outputs = true;
  define(r, OpId::kPoolingBackward, "Gradient of Pooling with respect to its data.", 3,
         {"out_grad", "data", "output"}, infer_pooling_backward, parse_attrs_as<PoolingAttrs>);

  OpDef& bn = define(r, OpId::kBatchNorm, "Batch normalization; updates the moving statistics in train mode.", 5,
                     {"data", "gamma", "beta", "moving_mean", "moving_var"}, infer_batch_norm,
                     parse_attrs_as<BatchNormAttrs>);
  bn.mutate_inputs = {3, 4};
  bn.grad = batch_norm_grad;
  bn.grad_uses_outputs = true;
  bn.grad_unused_outputs = 1;  // the normalized output: batch_norm_grad reads mean and var only
  OpDef& bn_backward =
      define(r, OpId::kBatchNormBackward, "Gradient of BatchNorm with respect to data, gamma and beta.", 5,
             {"out_grad", "data", "gamma", "mean", "var"}, infer_batch_norm_backward, parse_attrs_as<BatchNormAttrs>);
  // Per channel the kernel reads all of out_grad before writing data_grad.
  bn_backward.inplace = {{0, 0}};
}

}  // namespace kiln
