#include "frontend/nd_elemwise.h"

#include <bit>
#include <cstdint>

#include "frontend/invoke.h"
#include "ir/ops/elemwise.h"

namespace kiln {
namespace {

NDArray binary(OpId op, const NDArray& lhs, const NDArray& rhs) { return invoke1(op, {lhs, rhs}); }

// The same-shape op when the shapes agree (what MXNet's graphs use), else broadcasting.
NDArray arithmetic(OpId same_shape, OpId broadcast, const NDArray& lhs, const NDArray& rhs) {
  return binary(lhs.shape() == rhs.shape() ? same_shape : broadcast, lhs, rhs);
}

// `y = x + 1` in a loop would make equal attributes on every call: reuse
// the last ones this thread made (OpAttrs are immutable and shared). Bitwise
// equality, so -0.0 and NaN payloads keep their own attributes.
const OpAttrs& scalar_attrs(double s) {
  thread_local uint64_t last_bits = std::bit_cast<uint64_t>(s);
  thread_local OpAttrs last = OpAttrs::make(ScalarAttrs{.scalar = s});
  if (std::bit_cast<uint64_t>(s) != last_bits) {
    last = OpAttrs::make(ScalarAttrs{.scalar = s});
    last_bits = std::bit_cast<uint64_t>(s);
  }
  return last;
}

// One input: a span over the caller's array (no copy of the handle).
NDArray scalar(OpId op, const NDArray& x, double s) {
  return invoke1(op, std::span<const NDArray>(&x, 1), scalar_attrs(s));
}

NDArray unary(OpId op, const NDArray& x) { return invoke1(op, std::span<const NDArray>(&x, 1)); }

}  // namespace

NDArray operator+(const NDArray& l, const NDArray& r) {
  return arithmetic(OpId::kElemwiseAdd, OpId::kBroadcastAdd, l, r);
}
NDArray operator-(const NDArray& l, const NDArray& r) {
  return arithmetic(OpId::kElemwiseSub, OpId::kBroadcastSub, l, r);
}
NDArray operator*(const NDArray& l, const NDArray& r) {
  return arithmetic(OpId::kElemwiseMul, OpId::kBroadcastMul, l, r);
}
NDArray operator/(const NDArray& l, const NDArray& r) {
  return arithmetic(OpId::kElemwiseDiv, OpId::kBroadcastDiv, l, r);
}

NDArray operator+(const NDArray& x, double s) { return scalar(OpId::kPlusScalar, x, s); }
NDArray operator-(const NDArray& x, double s) { return scalar(OpId::kMinusScalar, x, s); }
NDArray operator*(const NDArray& x, double s) { return scalar(OpId::kMulScalar, x, s); }
NDArray operator/(const NDArray& x, double s) { return scalar(OpId::kDivScalar, x, s); }
NDArray operator+(double s, const NDArray& x) { return scalar(OpId::kPlusScalar, x, s); }
NDArray operator-(double s, const NDArray& x) { return scalar(OpId::kRMinusScalar, x, s); }
NDArray operator*(double s, const NDArray& x) { return scalar(OpId::kMulScalar, x, s); }
NDArray operator/(double s, const NDArray& x) { return scalar(OpId::kRDivScalar, x, s); }
NDArray operator-(const NDArray& x) { return unary(OpId::kNegative, x); }

NDArray operator==(const NDArray& l, const NDArray& r) { return binary(OpId::kBroadcastEqual, l, r); }
NDArray operator!=(const NDArray& l, const NDArray& r) { return binary(OpId::kBroadcastNotEqual, l, r); }
NDArray operator>(const NDArray& l, const NDArray& r) { return binary(OpId::kBroadcastGreater, l, r); }
NDArray operator>=(const NDArray& l, const NDArray& r) { return binary(OpId::kBroadcastGreaterEqual, l, r); }
NDArray operator<(const NDArray& l, const NDArray& r) { return binary(OpId::kBroadcastLesser, l, r); }
NDArray operator<=(const NDArray& l, const NDArray& r) { return binary(OpId::kBroadcastLesserEqual, l, r); }
NDArray operator==(const NDArray& x, double s) { return scalar(OpId::kEqualScalar, x, s); }
NDArray operator!=(const NDArray& x, double s) { return scalar(OpId::kNotEqualScalar, x, s); }
NDArray operator>(const NDArray& x, double s) { return scalar(OpId::kGreaterScalar, x, s); }
NDArray operator>=(const NDArray& x, double s) { return scalar(OpId::kGreaterEqualScalar, x, s); }
NDArray operator<(const NDArray& x, double s) { return scalar(OpId::kLesserScalar, x, s); }
NDArray operator<=(const NDArray& x, double s) { return scalar(OpId::kLesserEqualScalar, x, s); }
// s op x is x (mirrored op) s.
NDArray operator==(double s, const NDArray& x) { return scalar(OpId::kEqualScalar, x, s); }
NDArray operator!=(double s, const NDArray& x) { return scalar(OpId::kNotEqualScalar, x, s); }
NDArray operator>(double s, const NDArray& x) { return scalar(OpId::kLesserScalar, x, s); }
NDArray operator>=(double s, const NDArray& x) { return scalar(OpId::kLesserEqualScalar, x, s); }
NDArray operator<(double s, const NDArray& x) { return scalar(OpId::kGreaterScalar, x, s); }
NDArray operator<=(double s, const NDArray& x) { return scalar(OpId::kGreaterEqualScalar, x, s); }

namespace nd {

NDArray maximum(const NDArray& l, const NDArray& r) { return binary(OpId::kBroadcastMaximum, l, r); }
NDArray maximum(const NDArray& x, double s) { return scalar(OpId::kMaximumScalar, x, s); }
NDArray maximum(double s, const NDArray& x) { return scalar(OpId::kMaximumScalar, x, s); }
NDArray minimum(const NDArray& l, const NDArray& r) { return binary(OpId::kBroadcastMinimum, l, r); }
NDArray minimum(const NDArray& x, double s) { return scalar(OpId::kMinimumScalar, x, s); }
NDArray minimum(double s, const NDArray& x) { return scalar(OpId::kMinimumScalar, x, s); }
NDArray mod(const NDArray& l, const NDArray& r) { return binary(OpId::kBroadcastMod, l, r); }
NDArray fmod(const NDArray& l, const NDArray& r) { return binary(OpId::kBroadcastFmod, l, r); }
NDArray pow(const NDArray& base, const NDArray& exponent) { return binary(OpId::kBroadcastPower, base, exponent); }
NDArray pow(const NDArray& base, double exponent) { return scalar(OpId::kPowerScalar, base, exponent); }
NDArray pow(double base, const NDArray& exponent) { return scalar(OpId::kRPowerScalar, exponent, base); }

NDArray exp(const NDArray& x) { return unary(OpId::kExp, x); }
NDArray log(const NDArray& x) { return unary(OpId::kLog, x); }
NDArray sqrt(const NDArray& x) { return unary(OpId::kSqrt, x); }
NDArray square(const NDArray& x) { return unary(OpId::kSquare, x); }
NDArray tanh(const NDArray& x) { return unary(OpId::kTanh, x); }
NDArray erf(const NDArray& x) { return unary(OpId::kErf, x); }
NDArray sin(const NDArray& x) { return unary(OpId::kSin, x); }
NDArray cos(const NDArray& x) { return unary(OpId::kCos, x); }
NDArray tan(const NDArray& x) { return unary(OpId::kTan, x); }
NDArray arcsin(const NDArray& x) { return unary(OpId::kArcsin, x); }
NDArray arccos(const NDArray& x) { return unary(OpId::kArccos, x); }
NDArray arctan(const NDArray& x) { return unary(OpId::kArctan, x); }
NDArray sinh(const NDArray& x) { return unary(OpId::kSinh, x); }
NDArray cosh(const NDArray& x) { return unary(OpId::kCosh, x); }
NDArray arcsinh(const NDArray& x) { return unary(OpId::kArcsinh, x); }
NDArray arccosh(const NDArray& x) { return unary(OpId::kArccosh, x); }
NDArray arctanh(const NDArray& x) { return unary(OpId::kArctanh, x); }
NDArray round(const NDArray& x) { return unary(OpId::kRound, x); }
NDArray rint(const NDArray& x) { return unary(OpId::kRint, x); }
NDArray ceil(const NDArray& x) { return unary(OpId::kCeil, x); }
NDArray floor(const NDArray& x) { return unary(OpId::kFloor, x); }
NDArray sign(const NDArray& x) { return unary(OpId::kSign, x); }
NDArray sigmoid(const NDArray& x) { return unary(OpId::kSigmoid, x); }
NDArray relu(const NDArray& x) { return unary(OpId::kRelu, x); }
NDArray abs(const NDArray& x) { return unary(OpId::kAbs, x); }
NDArray negative(const NDArray& x) { return unary(OpId::kNegative, x); }

NDArray clip(const NDArray& x, double lo, double hi) {
  return invoke1(OpId::kClip, {x}, OpAttrs::make(ClipAttrs{.a_min = lo, .a_max = hi}));
}

NDArray where(const NDArray& condition, const NDArray& x, const NDArray& y) {
  return invoke1(OpId::kWhere, {condition, x, y});
}

NDArray cast(const NDArray& x, DType dtype) {
  return invoke1(OpId::kCast, {x}, OpAttrs::make(CastAttrs{.dtype = dtype}));
}

}  // namespace nd
}  // namespace kiln
