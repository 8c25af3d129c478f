// Gradients of the conv family's backward ops, so that gradients of
// gradients (create_graph) are right.
//
// Convolution is bilinear in (data, weight): its two backward ops are the
// same bilinear map with the roles exchanged, so each one's gradient is
// another of the three convolution ops. Average and sum pooling are linear:
// the gradient of their backward op is the pooling itself. BatchNorm's
// backward op is differentiated through its math written in ordinary ops
// (grad_of_composite). Max pooling's backward op has no gradient here: its
// adjoint would gather at each window's argmax, which no op does.
#include "ir/grad.h"
#include "ir/grad_ops.h"
#include "ir/op.h"
#include "ir/ops/conv.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/reduce.h"

namespace kiln {
namespace {

using grad_ops::mul;
using grad_ops::scalar;
using grad_ops::sub;

OpAttrs convolution_without_bias(const ConvolutionAttrs& a) {
  ConvolutionAttrs c = a;
  c.no_bias = true;
  return OpAttrs::make(c);
}

OpAttrs backward_data_attrs(const ConvolutionAttrs& a, const Shape& data_shape) {
  ConvolutionBackwardDataAttrs bd;
  static_cast<ConvolutionAttrs&>(bd) = a;
  bd.data_shape = data_shape;
  return OpAttrs::make(std::move(bd));
}

// dx = _backward_Convolution_data(dy, w) = conv^T(dy; w):
// <ddx, conv^T(dy; w)> = <conv(ddx; w), dy>, whose gradient with respect to w
// is the weight gradient of a convolution of ddx with output gradient dy.
void grad_convolution_backward_data(GradBuilder& b, const GradArgs& a, std::span<GradValue> in_grads) {
  const auto& attrs = a.attrs.as<ConvolutionBackwardDataAttrs>();
  const ConvolutionAttrs& conv = attrs;
  GradValue ddx = a.out_grads[0], dy = a.inputs[0], w = a.inputs[1];
  if (a.needs_grad[0]) in_grads[0] = b.op(OpId::kConvolution, {ddx, w}, convolution_without_bias(conv));
  if (a.needs_grad[1]) {
    ConvolutionAttrs c = conv;
    in_grads[1] = b.op(OpId::kConvolutionBackwardWeight, {dy, ddx}, OpAttrs::make(c));
  }
}

// dw = _backward_Convolution_weight(dy, x): <ddw, dw> = <dy, conv(x; ddw)>.
void grad_convolution_backward_weight(GradBuilder& b, const GradArgs& a, std::span<GradValue> in_grads) {
  const auto& conv = a.attrs.as<ConvolutionAttrs>();
  GradValue ddw = a.out_grads[0], dy = a.inputs[0], x = a.inputs[1];
  if (a.needs_grad[0]) in_grads[0] = b.op(OpId::kConvolution, {x, ddw}, convolution_without_bias(conv));
  if (a.needs_grad[1])
    in_grads[1] = b.op(OpId::kConvolutionBackwardData, {dy, ddw}, backward_data_attrs(conv, a.input_types[1].shape));
}

// _backward_Pooling(dy, x, y): linear in dy. For average and sum pooling the
// map does not depend on x or y and its adjoint is the pooling itself.
void grad_pooling_backward(GradBuilder& b, const GradArgs& a, std::span<GradValue> in_grads) {
  const auto& attrs = a.attrs.as<PoolingAttrs>();
  KILN_CHECK(attrs.pool_type != "max", NotSupported,
             "_backward_Pooling: max pooling is not twice differentiable in Kiln (no op gathers a gradient at "
             "each window's argmax, which its gradient's gradient needs); use avg pooling, or do not pass "
             "create_graph through it");
  if (a.needs_grad[0]) in_grads[0] = b.op(OpId::kPooling, {a.out_grads[0]}, a.attrs);
}

// _backward_BatchNorm(dy, x, gamma, mean, var) -> (dx, dgamma, dbeta), its
// math in ordinary ops. In train mode the mean and var inputs are the batch
// statistics of x (BatchNorm's gradient passes the forward's): they are
// recomputed from x here, so that their dependence on x is differentiated
// (BatchNorm's gradient ignores gradients reaching its mean and var outputs).
// In predict mode they are the moving statistics, constants.
void grad_batch_norm_backward(GradBuilder& b, const GradArgs& a, std::span<GradValue> in_grads) {
  const auto& attrs = a.attrs.as<BatchNormAttrs>();
  std::optional<bool> is_train = b.is_train();
  KILN_CHECK(is_train.has_value(), NotSupported,
             "_backward_BatchNorm: its gradient depends on the train/predict mode, which a compiled graph fixes "
             "only when it runs; differentiate it imperatively");
  const bool batch_stats = *is_train && !attrs.use_global_stats;
  const Shape& xs = a.input_types[1].shape;
  const BatchNormDims d = batch_norm_dims(attrs, xs);
  std::vector<int64_t> axes;  // every axis but the channel axis
  Shape channel_shape;        // [1, ..., C, ..., 1]
  for (int i = 0; i < xs.ndim(); ++i) {
    if (i != d.axis) axes.push_back(i);
    channel_shape.push_back(i == d.axis ? d.channels : 1);
  }
  const double count = static_cast<double>(d.outer * d.inner);
  grad_of_composite(b, a, in_grads, [&](GradBuilder& t, std::span<const GradValue> in) {
    GradValue dy = in[0], x = in[1];
    auto mean = [&](GradValue v) { return scalar(t, OpId::kMulScalar, grad_ops::sum(t, v, axes, true), 1 / count); };
    GradValue mu, var;
    if (batch_stats) {
      mu = mean(x);
      var = mean(t.op(OpId::kSquare, {sub(t, x, mu)}));
    } else {
      mu = grad_ops::reshape_to(t, in[3], channel_shape);
      var = grad_ops::reshape_to(t, in[4], channel_shape);
    }
    GradValue inv_std = scalar(t, OpId::kPowerScalar, scalar(t, OpId::kPlusScalar, var, attrs.eps), -0.5);
    GradValue xhat = mul(t, sub(t, x, mu), inv_std);
    GradValue scale = attrs.fix_gamma ? inv_std : mul(t, grad_ops::reshape_to(t, in[2], channel_shape), inv_std);
    GradValue dx_hat = dy;  // predict: dx = scale * dy
    if (batch_stats) dx_hat = sub(t, sub(t, dy, mean(dy)), mul(t, xhat, mean(mul(t, dy, xhat))));
    GradValue dx = mul(t, scale, dx_hat);
    GradValue dgamma = grad_ops::sum(t, mul(t, dy, xhat), axes, false);
    if (attrs.fix_gamma) dgamma = scalar(t, OpId::kMulScalar, dgamma, 0);
    GradValue dbeta = grad_ops::sum(t, dy, axes, false);
    return std::vector<GradValue>{dx, dgamma, dbeta};
  });
}

void set(OpRegistry& r, OpId id, GradFn fn) {
  OpDef& d = r.defined(id);
  d.differentiable = true;
  d.grad = fn;
}

}  // namespace

void register_conv_grads(OpRegistry& r) {
  set(r, OpId::kConvolutionBackwardData, grad_convolution_backward_data);
  set(r, OpId::kConvolutionBackwardWeight, grad_convolution_backward_weight);
  set(r, OpId::kPoolingBackward, grad_pooling_backward);
  set(r, OpId::kBatchNormBackward, grad_batch_norm_backward);
}

}  // namespace kiln
