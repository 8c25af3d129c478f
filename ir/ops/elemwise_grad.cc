// Gradients of the elemwise family, one small graph of ordinary ops each
// (ir/grad.h). Masks come from comparison ops, which return 1/0 in the
// input's dtype, so every gradient stays in the forward's dtype.
#include <cmath>

#include "ir/grad.h"
#include "ir/grad_ops.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/nn.h"

namespace kiln {
namespace {

using grad_ops::div;
using grad_ops::mul;
using grad_ops::neg;
using grad_ops::scalar;
using grad_ops::sub;
using grad_ops::unary;

const GradValue& dy(const GradArgs& a) { return a.out_grads[0]; }
const GradValue& lhs(const GradArgs& a) { return a.inputs[0]; }
const GradValue& rhs(const GradArgs& a) { return a.inputs[1]; }

// Sets the gradients of a binary op from full-shape partials, summing over
// broadcast axes for inputs that were broadcast.
void set_binary(GradBuilder& b, const GradArgs& a, std::span<GradValue> g, GradValue dl, GradValue dr) {
  if (a.needs_grad[0] && !dl.is_none()) g[0] = unbroadcast(b, dl, a.input_types[0].shape);
  if (a.needs_grad[1] && !dr.is_none()) g[1] = unbroadcast(b, dr, a.input_types[1].shape);
}

void add_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) { set_binary(b, a, g, dy(a), dy(a)); }
void sub_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  set_binary(b, a, g, dy(a), a.needs_grad[1] ? neg(b, dy(a)) : GradValue{});
}
void mul_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  set_binary(b, a, g, a.needs_grad[0] ? mul(b, dy(a), rhs(a)) : GradValue{},
             a.needs_grad[1] ? mul(b, dy(a), lhs(a)) : GradValue{});
}
void div_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  GradValue dl = a.needs_grad[0] ? div(b, dy(a), rhs(a)) : GradValue{};
  GradValue dr;
  if (a.needs_grad[1]) {  // -dy * lhs / rhs^2
    dr = neg(b, div(b, mul(b, dy(a), lhs(a)), b.op(OpId::kSquare, {rhs(a)})));
  }
  set_binary(b, a, g, dl, dr);
}
void power_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  GradValue dl, dr;
  if (a.needs_grad[0]) {  // dy * rhs * lhs^(rhs - 1)
    GradValue p = b.op(OpId::kBroadcastPower, {lhs(a), scalar(b, OpId::kMinusScalar, rhs(a), 1)});
    dl = mul(b, dy(a), mul(b, rhs(a), p));
  }
  if (a.needs_grad[1]) {  // dy * lhs^rhs * log(lhs)
    GradValue out = b.op(OpId::kBroadcastPower, {lhs(a), rhs(a)});
    dr = mul(b, mul(b, dy(a), out), b.op(OpId::kLog, {lhs(a)}));
  }
  set_binary(b, a, g, dl, dr);
}
// maximum / minimum: the gradient goes to the input that was chosen (lhs on ties).
template <OpId kChooseLhs>
void extremum_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  GradValue mask = b.op(kChooseLhs, {lhs(a), rhs(a)});
  GradValue dl = a.needs_grad[0] ? mul(b, dy(a), mask) : GradValue{};
  GradValue dr = a.needs_grad[1] ? mul(b, dy(a), scalar(b, OpId::kRMinusScalar, mask, 1)) : GradValue{};
  set_binary(b, a, g, dl, dr);
}

double scalar_of(const GradArgs& a) { return a.attrs.as<ScalarAttrs>().scalar; }

void identity_grad(GradBuilder&, const GradArgs& a, std::span<GradValue> g) { g[0] = dy(a); }
// BlockGrad: no gradient reaches the input (a zero contribution).
void block_grad(GradBuilder&, const GradArgs&, std::span<GradValue>) {}
void negate_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) { g[0] = neg(b, dy(a)); }
void mul_scalar_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  g[0] = scalar(b, OpId::kMulScalar, dy(a), scalar_of(a));
}
void div_scalar_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  g[0] = scalar(b, OpId::kDivScalar, dy(a), scalar_of(a));
}
void rdiv_scalar_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // d(s/x) = -s/x^2
  GradValue t = div(b, dy(a), b.op(OpId::kSquare, {lhs(a)}));
  g[0] = scalar(b, OpId::kMulScalar, t, -scalar_of(a));
}
void power_scalar_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // s * x^(s-1)
  double s = scalar_of(a);
  GradValue p = scalar(b, OpId::kPowerScalar, lhs(a), s - 1);
  g[0] = mul(b, dy(a), scalar(b, OpId::kMulScalar, p, s));
}
void rpower_scalar_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // s^x * ln s
  double s = scalar_of(a);
  GradValue p = scalar(b, OpId::kRPowerScalar, lhs(a), s);
  g[0] = mul(b, dy(a), scalar(b, OpId::kMulScalar, p, std::log(s)));
}
template <OpId kMaskOp>
void masked_scalar_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  g[0] = mul(b, dy(a), scalar(b, kMaskOp, lhs(a), scalar_of(a)));
}

// Unary math; `out` is the forward output where the op keeps it.
void exp_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) { g[0] = mul(b, dy(a), a.outputs[0]); }
void log_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) { g[0] = div(b, dy(a), lhs(a)); }
void sqrt_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  g[0] = scalar(b, OpId::kMulScalar, div(b, dy(a), a.outputs[0]), 0.5);
}
void square_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  g[0] = mul(b, dy(a), scalar(b, OpId::kMulScalar, lhs(a), 2));
}
void tanh_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // 1 - y^2
  GradValue one_minus = scalar(b, OpId::kRMinusScalar, b.op(OpId::kSquare, {a.outputs[0]}), 1);
  g[0] = mul(b, dy(a), one_minus);
}
void erf_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // 2/sqrt(pi) exp(-x^2)
  GradValue e = b.op(OpId::kExp, {b.op(OpId::kNegative, {b.op(OpId::kSquare, {lhs(a)})})});
  g[0] = mul(b, dy(a), scalar(b, OpId::kMulScalar, e, 1.1283791670955125739));
}
// Trigonometric and hyperbolic functions and their inverses.
void sin_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // cos x
  g[0] = mul(b, dy(a), unary(b, OpId::kCos, lhs(a)));
}
void cos_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // -sin x
  g[0] = neg(b, mul(b, dy(a), unary(b, OpId::kSin, lhs(a))));
}
void tan_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // 1 + y^2
  g[0] = mul(b, dy(a), scalar(b, OpId::kPlusScalar, unary(b, OpId::kSquare, a.outputs[0]), 1));
}
// dy / sqrt(1 - x^2), negated for arccos.
template <bool kNegate>
void arcsin_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  GradValue root = unary(b, OpId::kSqrt, scalar(b, OpId::kRMinusScalar, unary(b, OpId::kSquare, lhs(a)), 1));
  GradValue d = div(b, dy(a), root);
  g[0] = kNegate ? neg(b, d) : d;
}
void arctan_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // 1 / (1 + x^2)
  g[0] = div(b, dy(a), scalar(b, OpId::kPlusScalar, unary(b, OpId::kSquare, lhs(a)), 1));
}
void sinh_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // cosh x
  g[0] = mul(b, dy(a), unary(b, OpId::kCosh, lhs(a)));
}
void cosh_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // sinh x
  g[0] = mul(b, dy(a), unary(b, OpId::kSinh, lhs(a)));
}
void arcsinh_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // 1 / sqrt(x^2 + 1)
  g[0] = div(b, dy(a), unary(b, OpId::kSqrt, scalar(b, OpId::kPlusScalar, unary(b, OpId::kSquare, lhs(a)), 1)));
}
void arccosh_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // 1 / sqrt(x^2 - 1)
  g[0] = div(b, dy(a), unary(b, OpId::kSqrt, scalar(b, OpId::kMinusScalar, unary(b, OpId::kSquare, lhs(a)), 1)));
}
void arctanh_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // 1 / (1 - x^2)
  g[0] = div(b, dy(a), scalar(b, OpId::kRMinusScalar, unary(b, OpId::kSquare, lhs(a)), 1));
}
// mod and fmod: lhs - q * rhs with q an integer (floor or truncated lhs / rhs)
// that is constant almost everywhere: dy for lhs, -dy * q for rhs, with q
// recovered from the output as rint((lhs - out) / rhs).
void mod_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  GradValue dr;
  if (a.needs_grad[1]) {
    GradValue q = unary(b, OpId::kRint, div(b, sub(b, lhs(a), a.outputs[0]), rhs(a)));
    dr = neg(b, mul(b, dy(a), q));
  }
  set_binary(b, a, g, dy(a), dr);
}
void sigmoid_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // y (1 - y)
  GradValue y = a.outputs[0];
  g[0] = mul(b, dy(a), mul(b, y, scalar(b, OpId::kRMinusScalar, y, 1)));
}
// From the output (out > 0 exactly where in > 0), through Activation's
// one-pass backward kernel: backward keeps the output, which the next layer
// usually keeps anyway, and no mask array is made.
void relu_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  g[0] = b.op(OpId::kActivationBackward, {dy(a), a.outputs[0]}, OpAttrs::make(ActivationAttrs{ActType::kRelu}));
}
void abs_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {  // sign(x)
  GradValue pos = scalar(b, OpId::kGreaterScalar, lhs(a), 0);
  GradValue negative = scalar(b, OpId::kLesserScalar, lhs(a), 0);
  g[0] = mul(b, dy(a), b.op(OpId::kElemwiseSub, {pos, negative}));
}
void clip_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  const auto& c = a.attrs.as<ClipAttrs>();
  GradValue inside = mul(b, scalar(b, OpId::kGreaterEqualScalar, lhs(a), c.a_min),
                         scalar(b, OpId::kLesserEqualScalar, lhs(a), c.a_max));
  g[0] = mul(b, dy(a), inside);
}
void cast_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  CastAttrs back;
  back.dtype = a.input_types[0].dtype;
  g[0] = b.op(OpId::kCast, {dy(a)}, OpAttrs::make(back));
}
void where_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> g) {
  GradValue cond = a.inputs[0];
  GradValue zeros = scalar(b, OpId::kMulScalar, dy(a), 0);
  if (a.needs_grad[1]) g[1] = unbroadcast(b, b.op(OpId::kWhere, {cond, dy(a), zeros}), a.input_types[1].shape);
  if (a.needs_grad[2]) g[2] = unbroadcast(b, b.op(OpId::kWhere, {cond, zeros, dy(a)}), a.input_types[2].shape);
}

void set(OpRegistry& r, OpId id, GradFn fn, bool uses_inputs = true, bool uses_outputs = false) {
  OpDef& d = r.defined(id);
  d.grad = fn;
  d.grad_uses_inputs = uses_inputs;
  d.grad_uses_outputs = uses_outputs;
}

}  // namespace

void register_elemwise_grads(OpRegistry& r) {
  for (OpId id : {OpId::kElemwiseAdd, OpId::kBroadcastAdd}) set(r, id, add_grad, false);
  for (OpId id : {OpId::kElemwiseSub, OpId::kBroadcastSub}) set(r, id, sub_grad, false);
  for (OpId id : {OpId::kElemwiseMul, OpId::kBroadcastMul}) set(r, id, mul_grad);
  for (OpId id : {OpId::kElemwiseDiv, OpId::kBroadcastDiv}) set(r, id, div_grad);
  set(r, OpId::kBroadcastPower, power_grad);
  set(r, OpId::kBroadcastMaximum, extremum_grad<OpId::kBroadcastGreaterEqual>);
  set(r, OpId::kBroadcastMinimum, extremum_grad<OpId::kBroadcastLesserEqual>);
  set(r, OpId::kPlusScalar, identity_grad, false);
  set(r, OpId::kMinusScalar, identity_grad, false);
  set(r, OpId::kRMinusScalar, negate_grad, false);
  set(r, OpId::kMulScalar, mul_scalar_grad, false);
  set(r, OpId::kDivScalar, div_scalar_grad, false);
  set(r, OpId::kRDivScalar, rdiv_scalar_grad);
  set(r, OpId::kPowerScalar, power_scalar_grad);
  set(r, OpId::kRPowerScalar, rpower_scalar_grad);
  set(r, OpId::kMaximumScalar, masked_scalar_grad<OpId::kGreaterEqualScalar>);
  set(r, OpId::kMinimumScalar, masked_scalar_grad<OpId::kLesserEqualScalar>);
  set(r, OpId::kExp, exp_grad, false, true);
  set(r, OpId::kLog, log_grad);
  set(r, OpId::kSqrt, sqrt_grad, false, true);
  set(r, OpId::kSquare, square_grad);
  set(r, OpId::kTanh, tanh_grad, false, true);
  set(r, OpId::kErf, erf_grad);
  set(r, OpId::kSin, sin_grad);
  set(r, OpId::kCos, cos_grad);
  set(r, OpId::kTan, tan_grad, false, true);
  set(r, OpId::kArcsin, arcsin_grad<false>);
  set(r, OpId::kArccos, arcsin_grad<true>);
  set(r, OpId::kArctan, arctan_grad);
  set(r, OpId::kSinh, sinh_grad);
  set(r, OpId::kCosh, cosh_grad);
  set(r, OpId::kArcsinh, arcsinh_grad);
  set(r, OpId::kArccosh, arccosh_grad);
  set(r, OpId::kArctanh, arctanh_grad);
  for (OpId id : {OpId::kBroadcastMod, OpId::kBroadcastFmod}) set(r, id, mod_grad, true, true);
  set(r, OpId::kSigmoid, sigmoid_grad, false, true);
  set(r, OpId::kRelu, relu_grad, false, true);
  set(r, OpId::kAbs, abs_grad);
  set(r, OpId::kNegative, negate_grad, false);
  set(r, OpId::kClip, clip_grad);
  set(r, OpId::kCopy, identity_grad, false);
  set(r, OpId::kBlockGrad, block_grad, false);
  set(r, OpId::kCast, cast_grad, false);
  set(r, OpId::kWhere, where_grad);
}

}  // namespace kiln
