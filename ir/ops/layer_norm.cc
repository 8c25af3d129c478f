// LayerNorm and _backward_LayerNorm: inference and gradients (semantics in
// ir/ops/layer_norm.h).
//
// LayerNorm's gradient uses all three outputs' gradients: out's through the
// fused _backward_LayerNorm, mean's and std's through ordinary ops (d mean /
// dx = 1/n, d std / dx = xhat / n along the axis). Because the mean and std
// outputs then pass gradients on correctly, _backward_LayerNorm may read them
// as independent inputs, and its own gradient is its formula in ordinary ops
// (grad_of_composite): a second differentiation reaches x through the mean and
// std outputs of the forward node.
#include "ir/ops/layer_norm.h"

#include "ir/grad.h"
#include "ir/grad_ops.h"
#include "ir/op.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/matrix.h"

namespace kiln {

LayerNormDims layer_norm_dims(const LayerNormAttrs& a, const Shape& data) {
  KILN_CHECK(data.ndim() >= 1, ShapeError, "data must have at least one axis, got a scalar");
  LayerNormDims d;
  d.axis = normalize_axis(a.axis, data.ndim(), "LayerNorm axis");
  for (int i = 0; i < data.ndim(); ++i) {
    if (i < d.axis) d.outer *= data[i];
    if (i > d.axis) d.inner *= data[i];
  }
  d.n = data[d.axis];
  KILN_CHECK(d.n > 0, ShapeError, "data {} has length 0 on the normalized axis {}", data, d.axis);
  return d;
}

Shape layer_norm_stat_shape(const LayerNormDims& d, const Shape& data) {
  Shape s = data;
  s[d.axis] = 1;
  return s;
}

namespace {

using grad_ops::add;
using grad_ops::div;
using grad_ops::mul;
using grad_ops::scalar;
using grad_ops::sub;

void check_float(std::span<const TensorType> in, std::initializer_list<const char*> names) {
  const DType t = in[0].dtype;
  KILN_CHECK(is_floating(t), TypeError, "{} must be float32, float64, float16 or bfloat16, got {}", *names.begin(), t);
  size_t i = 0;
  for (const char* name : names) {
    KILN_CHECK(in[i].dtype == t, TypeError, "{} is {} but {} is {}; all inputs must have one dtype", name, in[i].dtype,
               *names.begin(), t);
    ++i;
  }
}

void check_param(const TensorType& p, const char* name, const LayerNormDims& d, const Shape& data) {
  KILN_CHECK(p.shape == Shape{d.n}, ShapeError, "{} has shape {} but data {} has length {} on axis {} (needs [{}])",
             name, p.shape, data, d.n, d.axis, d.n);
}

void check_stat(const TensorType& s, const char* name, const Shape& want) {
  KILN_CHECK(s.shape == want, ShapeError, "{} has shape {} but must be data's shape with the axis of length 1, {}",
             name, s.shape, want);
}

// (data, gamma, beta) -> (out, mean, std)
void infer_layer_norm(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_float(in, {"data", "gamma", "beta"});
  const auto& a = attrs.as<LayerNormAttrs>();
  KILN_CHECK(a.eps >= 0, ValueError, "eps must be >= 0, got {}", a.eps);
  const Shape& x = in[0].shape;
  LayerNormDims d = layer_norm_dims(a, x);
  check_param(in[1], "gamma", d, x);
  check_param(in[2], "beta", d, x);
  Shape stat = layer_norm_stat_shape(d, x);
  out.push_back({x, in[0].dtype});
  out.push_back({stat, in[0].dtype});
  out.push_back({stat, in[0].dtype});
}

// (out_grad, data, gamma, mean, std) -> (d_data, d_gamma, d_beta)
void infer_layer_norm_backward(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_float(in, {"out_grad", "data", "gamma", "mean", "std"});
  const Shape& x = in[1].shape;
  LayerNormDims d = layer_norm_dims(attrs.as<LayerNormAttrs>(), x);
  KILN_CHECK(in[0].shape == x, ShapeError, "out_grad has shape {} but data is {}", in[0].shape, x);
  check_param(in[2], "gamma", d, x);
  Shape stat = layer_norm_stat_shape(d, x);
  check_stat(in[3], "mean", stat);
  check_stat(in[4], "std", stat);
  out.push_back({x, in[1].dtype});
  out.push_back({Shape{d.n}, in[1].dtype});
  out.push_back({Shape{d.n}, in[1].dtype});
}

// Every axis of `rank` but `axis`.
std::vector<int64_t> other_axes(int rank, int axis) {
  std::vector<int64_t> axes;
  for (int i = 0; i < rank; ++i)
    if (i != axis) axes.push_back(i);
  return axes;
}

// out's gradient through the fused op; mean's and std's added as ordinary ops.
void grad_layer_norm(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  GradValue dy = g.out_grads[0], dmean = g.out_grads[1], dstd = g.out_grads[2];
  GradValue x = g.inputs[0], mean = g.outputs[1], std = g.outputs[2];
  if (!dy.is_none() && (g.needs_grad[0] || g.needs_grad[1] || g.needs_grad[2])) {
    GradValue in[] = {dy, x, g.inputs[1], mean, std};
    std::vector<GradValue> r = b.apply(OpId::kLayerNormBackward, in, g.attrs);
    for (int i = 0; i < 3; ++i)
      if (g.needs_grad[i]) in_grads[i] = r[i];
  }
  if (!g.needs_grad[0] || (dmean.is_none() && dstd.is_none())) return;
  const Shape& xs = g.input_types[0].shape;
  const double inv_n = 1.0 / static_cast<double>(layer_norm_dims(g.attrs.as<LayerNormAttrs>(), xs).n);
  // (dmean + dstd * xhat) / n, broadcast along the axis.
  GradValue extra;
  if (!dstd.is_none()) extra = mul(b, dstd, div(b, sub(b, x, mean), std));
  if (!dmean.is_none()) extra = extra.is_none() ? dmean : add(b, extra, dmean);
  extra = scalar(b, OpId::kMulScalar, extra, inv_n);
  if (!in_grads[0].is_none()) {
    in_grads[0] = add(b, in_grads[0], extra);  // broadcasts extra if it is stat-shaped
  } else {
    in_grads[0] =
        b.type(extra).shape == xs ? extra : b.op(OpId::kBroadcastTo, {extra}, OpAttrs::make(BroadcastToAttrs{xs}));
  }
}

// _backward_LayerNorm's formula (ir/ops/layer_norm.h) in ordinary ops.
void grad_layer_norm_backward(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  const Shape& xs = g.input_types[1].shape;
  const LayerNormDims d = layer_norm_dims(g.attrs.as<LayerNormAttrs>(), xs);
  Shape param_shape;  // [1, ..., n, ..., 1]
  for (int i = 0; i < xs.ndim(); ++i) param_shape.push_back(i == d.axis ? d.n : 1);
  const std::vector<int64_t> others = other_axes(xs.ndim(), d.axis);
  const double inv_n = 1.0 / static_cast<double>(d.n);
  grad_of_composite(b, g, in_grads, [&](GradBuilder& t, std::span<const GradValue> in) {
    GradValue dy = in[0], x = in[1], mean = in[3], std = in[4];
    GradValue gamma = grad_ops::reshape_to(t, in[2], param_shape);
    auto mean_axis = [&](GradValue v) {
      return scalar(t, OpId::kMulScalar, grad_ops::sum(t, v, {d.axis}, true), inv_n);
    };
    auto sum_others = [&](GradValue v) { return others.empty() ? v : grad_ops::sum(t, v, others, false); };
    GradValue xhat = div(t, sub(t, x, mean), std);
    GradValue gg = mul(t, dy, gamma);
    GradValue dx = div(t, sub(t, sub(t, gg, mean_axis(gg)), mul(t, xhat, mean_axis(mul(t, gg, xhat)))), std);
    GradValue dgamma = sum_others(mul(t, dy, xhat));
    GradValue dbeta = sum_others(dy);
    return std::vector<GradValue>{dx, dgamma, dbeta};
  });
}

}  // namespace

void register_layer_norm_ops(OpRegistry& r) {
  OpDef& ln = r.define(OpId::kLayerNorm, "Normalization along one axis with a learned scale and shift per position.");
  ln.num_inputs = 3;
  ln.input_names = {"data", "gamma", "beta"};
  ln.infer = infer_layer_norm;
  ln.parse_attrs = parse_attrs_as<LayerNormAttrs>;
  ln.grad = grad_layer_norm;
  ln.grad_uses_outputs = true;
  ln.grad_unused_outputs = 1;  // reads mean and std, not the normalized output
  ln.grad_takes_none_out_grads = true;  // unread mean and std add no terms

  OpDef& back = r.define(OpId::kLayerNormBackward, "Gradient of LayerNorm's output with respect to data, gamma, beta.");
  back.num_inputs = 5;
  back.input_names = {"out_grad", "data", "gamma", "mean", "std"};
  back.infer = infer_layer_norm_backward;
  back.parse_attrs = parse_attrs_as<LayerNormAttrs>;
  back.grad = grad_layer_norm_backward;
}

}  // namespace kiln
