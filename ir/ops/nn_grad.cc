// Gradients of the nn family's backward ops, so that gradients of gradients
// (create_graph) are right: each is built from ordinary ops or from backward
// ops that have gradients themselves.
//
// Every backward op here is linear in out_grad (dy). Its gradient with
// respect to dy is therefore the adjoint of that linear map applied to the
// incoming gradient (ddx), and its gradient with respect to the saved forward
// value is ddx * dy times the derivative of the factor it multiplies dy by.
#include <cmath>
#include <numbers>

#include "ir/grad.h"
#include "ir/grad_ops.h"
#include "ir/op.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/gelu_tanh.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"

namespace kiln {
namespace {

using grad_ops::mul;
using grad_ops::scalar;
using grad_ops::sub;
using grad_ops::sum;
using grad_ops::unary;

// 1 where x > 0, -1 where x < 0, 0 at 0.
GradValue sign(GradBuilder& b, GradValue x) {
  return sub(b, scalar(b, OpId::kGreaterScalar, x, 0), scalar(b, OpId::kLesserScalar, x, 0));
}

// _backward_Activation(dy, y) = dy * g(y), with g the activation's derivative
// written in terms of its output y.
void grad_activation_backward(GradBuilder& b, const GradArgs& a, std::span<GradValue> in_grads) {
  GradValue ddx = a.out_grads[0], dy = a.inputs[0], y = a.inputs[1];
  if (a.needs_grad[0]) in_grads[0] = b.op(OpId::kActivationBackward, {ddx, y}, a.attrs);
  if (!a.needs_grad[1]) return;
  GradValue dg;  // g'(y)
  switch (a.attrs.as<ActivationAttrs>().act_type) {
    case ActType::kRelu:  // g = [y > 0]: constant almost everywhere
      return;
    case ActType::kSigmoid:  // g = y - y^2
      dg = scalar(b, OpId::kRMinusScalar, scalar(b, OpId::kMulScalar, y, 2), 1);
      break;
    case ActType::kTanh:  // g = 1 - y^2
      dg = scalar(b, OpId::kMulScalar, y, -2);
      break;
    case ActType::kSoftrelu:  // g = 1 - e^-y
      dg = unary(b, OpId::kExp, unary(b, OpId::kNegative, y));
      break;
    case ActType::kSoftsign:  // g = (1 - |y|)^2 = 1 - 2|y| + y^2
      dg = sub(b, scalar(b, OpId::kMulScalar, y, 2), scalar(b, OpId::kMulScalar, sign(b, y), 2));
      break;
  }
  in_grads[1] = mul(b, mul(b, ddx, dy), dg);
}

// _backward_LeakyReLU(dy, x) = dy * f'(x).
void grad_leaky_relu_backward(GradBuilder& b, const GradArgs& a, std::span<GradValue> in_grads) {
  const auto& attrs = a.attrs.as<LeakyReLUAttrs>();
  GradValue ddx = a.out_grads[0], dy = a.inputs[0], x = a.inputs[1];
  if (a.needs_grad[0]) in_grads[0] = b.op(OpId::kLeakyReLUBackward, {ddx, x}, a.attrs);
  if (!a.needs_grad[1]) return;
  // e^x where x <= 0, 0 elsewhere; min(x, 0) keeps the unused branch finite.
  auto exp_of_negative_part = [&] {
    GradValue e = unary(b, OpId::kExp, scalar(b, OpId::kMinimumScalar, x, 0));
    return mul(b, e, scalar(b, OpId::kLesserEqualScalar, x, 0));
  };
  GradValue d2;  // f''(x)
  switch (attrs.act_type) {
    case LeakyType::kLeaky:  // piecewise linear
      return;
    case LeakyType::kElu:  // slope * e^x for x <= 0
      d2 = scalar(b, OpId::kMulScalar, exp_of_negative_part(), attrs.slope);
      break;
    case LeakyType::kSelu:  // lambda * alpha * e^x for x <= 0
      d2 = scalar(b, OpId::kMulScalar, exp_of_negative_part(), kSeluLambda * kSeluAlpha);
      break;
    case LeakyType::kGelu: {  // f = x Phi(x): f'' = phi(x) (2 - x^2)
      GradValue x2 = unary(b, OpId::kSquare, x);
      GradValue phi = scalar(b, OpId::kMulScalar, unary(b, OpId::kExp, scalar(b, OpId::kMulScalar, x2, -0.5)),
                             std::numbers::inv_sqrtpi / std::numbers::sqrt2);
      d2 = mul(b, phi, scalar(b, OpId::kRMinusScalar, x2, 2));
      break;
    }
    case LeakyType::kGeluTanh: {
      // f = 0.5 x (1 + t), t = tanh(u), u = c (x + a x^3):
      // f'' = (1 - t^2) (u' + 0.5 x (u'' - 2 t u'^2)), u' = c (1 + 3 a x^2), u'' = 6 a c x.
      const double c = gelu_tanh::kSqrt2OverPi, k = gelu_tanh::kCubic;
      GradValue x2 = unary(b, OpId::kSquare, x);
      GradValue u = scalar(b, OpId::kMulScalar, grad_ops::add(b, x, scalar(b, OpId::kMulScalar, mul(b, x2, x), k)), c);
      GradValue t = unary(b, OpId::kTanh, u);
      GradValue sech2 = scalar(b, OpId::kRMinusScalar, unary(b, OpId::kSquare, t), 1);
      GradValue du = scalar(b, OpId::kPlusScalar, scalar(b, OpId::kMulScalar, x2, 3 * k * c), c);
      GradValue d2u = scalar(b, OpId::kMulScalar, x, 6 * k * c);
      GradValue inner = sub(b, d2u, scalar(b, OpId::kMulScalar, mul(b, t, unary(b, OpId::kSquare, du)), 2));
      d2 = mul(b, sech2, grad_ops::add(b, du, scalar(b, OpId::kMulScalar, mul(b, x, inner), 0.5)));
      break;
    }
    default:
      throw NotSupported(fmt::format("_backward_LeakyReLU: act_type '{}' has no second derivative here",
                                     print_attr(attrs.act_type)));
  }
  in_grads[1] = mul(b, mul(b, ddx, dy), d2);
}

double inverse_temperature(const SoftmaxAttrs& a) { return a.temperature ? 1.0 / *a.temperature : 1.0; }

// _backward_softmax(dy, y) = s y (dy - sum(dy y)), s = 1/T, sums along axis.
// It is self-adjoint in dy; with respect to y:
// s (ddx (dy - sum(dy y)) - sum(ddx y) dy).
void grad_softmax_backward(GradBuilder& b, const GradArgs& a, std::span<GradValue> in_grads) {
  const auto& attrs = a.attrs.as<SoftmaxAttrs>();
  GradValue ddx = a.out_grads[0], dy = a.inputs[0], y = a.inputs[1];
  if (a.needs_grad[0]) in_grads[0] = b.op(OpId::kSoftmaxBackward, {ddx, y}, a.attrs);
  if (!a.needs_grad[1]) return;
  GradValue s_dy = sum(b, mul(b, dy, y), {attrs.axis}, true);
  GradValue s_ddx = sum(b, mul(b, ddx, y), {attrs.axis}, true);
  GradValue gy = sub(b, mul(b, ddx, sub(b, dy, s_dy)), mul(b, s_ddx, dy));
  in_grads[1] = scalar(b, OpId::kMulScalar, gy, inverse_temperature(attrs));
}

// _backward_log_softmax(dy, y) = s (dy - e^y sum(dy)). With respect to dy:
// s (ddx - sum(ddx e^y)); with respect to y: -s ddx e^y sum(dy).
void grad_log_softmax_backward(GradBuilder& b, const GradArgs& a, std::span<GradValue> in_grads) {
  const auto& attrs = a.attrs.as<SoftmaxAttrs>();
  const double s = inverse_temperature(attrs);
  GradValue ddx = a.out_grads[0], dy = a.inputs[0], y = a.inputs[1];
  GradValue p = unary(b, OpId::kExp, y);
  if (a.needs_grad[0]) {
    GradValue d = sub(b, ddx, sum(b, mul(b, ddx, p), {attrs.axis}, true));
    in_grads[0] = scalar(b, OpId::kMulScalar, d, s);
  }
  if (a.needs_grad[1]) {
    GradValue d = mul(b, mul(b, ddx, p), sum(b, dy, {attrs.axis}, true));
    in_grads[1] = scalar(b, OpId::kMulScalar, d, -s);
  }
}

// _backward_pick scatters dy into zeros: its adjoint picks.
void grad_pick_backward(GradBuilder& b, const GradArgs& a, std::span<GradValue> in_grads) {
  if (!a.needs_grad[0]) return;
  const auto& pb = a.attrs.as<PickBackwardAttrs>();
  GradValue picked = b.op(OpId::kPick, {a.out_grads[0], a.inputs[1]},
                          OpAttrs::make(PickAttrs{pb.axis, pb.keepdims, pb.mode}));
  in_grads[0] = grad_ops::reshape_to(b, picked, a.input_types[0].shape);
}

// _backward_kiln_softmax_cross_entropy(dy, x, label) = (p - onehot) dy per
// row, p = softmax(x). With respect to dy: sum(ddx p) - ddx[label] per row;
// with respect to x: dy * _backward_softmax(ddx, p).
void grad_softmax_cross_entropy_backward(GradBuilder& b, const GradArgs& a, std::span<GradValue> in_grads) {
  GradValue ddx = a.out_grads[0], dy = a.inputs[0], x = a.inputs[1], label = a.inputs[2];
  const Shape& xs = a.input_types[1].shape;
  OpAttrs softmax = OpAttrs::make(SoftmaxAttrs{});
  GradValue p = b.op(OpId::kSoftmax, {x}, softmax);
  if (a.needs_grad[0]) {
    GradValue picked = b.op(OpId::kPick, {ddx, label}, OpAttrs::make(PickAttrs{1, false, TakeMode::kClip}));
    in_grads[0] = sub(b, sum(b, mul(b, ddx, p), {1}, false), picked);
  }
  if (a.needs_grad[1]) {
    GradValue per_row = grad_ops::reshape_to(b, dy, Shape{xs[0], 1});
    in_grads[1] = mul(b, b.op(OpId::kSoftmaxBackward, {ddx, p}, softmax), per_row);
  }
}

void set(OpRegistry& r, OpId id, GradFn fn) {
  OpDef& d = r.defined(id);
  d.differentiable = true;
  d.grad = fn;
}

}  // namespace

void register_nn_grads(OpRegistry& r) {
  set(r, OpId::kActivationBackward, grad_activation_backward);
  set(r, OpId::kLeakyReLUBackward, grad_leaky_relu_backward);
  set(r, OpId::kSoftmaxBackward, grad_softmax_backward);
  set(r, OpId::kLogSoftmaxBackward, grad_log_softmax_backward);
  set(r, OpId::kPickBackward, grad_pick_backward);
  set(r, OpId::kSoftmaxCrossEntropyBackward, grad_softmax_cross_entropy_backward);
}

}  // namespace kiln
