// ONNX converters of elementwise ops: arithmetic with broadcasting, Mod,
// BitShift, unary math, IsNaN/IsInf, Clip, Cast, Where, variadic
// Sum/Max/Min/Mean.
#include <cmath>
#include <limits>

#include "frontend/formats/onnx/node_context.h"
#include "frontend/formats/onnx/tensor.h"
#include "frontend/nd_init.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/nn.h"

namespace kiln::onnx {
namespace {

template <OpId kId>
void convert_binary(NodeContext& n) {
  KILN_CHECK(n.type(0).dtype == n.type(1).dtype, TypeError, "inputs of different dtypes: {} and {}",
             dtype_name(n.type(0).dtype), dtype_name(n.type(1).dtype));
  n.set_output(0, n.op1(kId, {n.input(0), n.input(1)}));
}

template <OpId kId>
void convert_unary(NodeContext& n) {
  n.set_output(0, n.op1(kId, {n.input(0)}));
}

void convert_reciprocal(NodeContext& n) {
  n.set_output(0, n.op1(OpId::kRDivScalar, {n.input(0)}, ScalarAttrs{.scalar = 1.0}));
}

// Mod: fmod 0 is mod with the divisor's sign (integers only in ONNX;
// floating-point inputs are accepted too), fmod 1 C's fmod. int16, uint16
// and uint32 (dtypes Kiln stores but does not compute in) run in int64, which
// holds every value and every remainder, and cast back; uint64 (which int64
// does not hold) runs in Kiln's mod, which takes uint64.
void convert_mod(NodeContext& n) {
  const DType t = n.type(0).dtype;
  KILN_CHECK(t == n.type(1).dtype, TypeError, "inputs of different dtypes: {} and {}", dtype_name(t),
             dtype_name(n.type(1).dtype));
  if (t == DType::kBool) n.unsupported(fmt::format("Mod of {}", dtype_name(t)));
  const OpId id = n.attr_int("fmod", 0) != 0 ? OpId::kBroadcastFmod : OpId::kBroadcastMod;
  const bool widen = t == DType::kInt16 || t == DType::kUint16 || t == DType::kUint32;
  auto in = [&](size_t i) {
    return widen ? n.op1(OpId::kCast, {n.input(i)}, CastAttrs{.dtype = DType::kInt64}) : n.input(i);
  };
  ir::Entry y = n.op1(id, {in(0), in(1)});
  if (widen) y = n.op1(OpId::kCast, {y}, CastAttrs{.dtype = t});
  n.set_output(0, y);
}

// BitShift of unsigned integers, x and the shift amounts s broadcast, both
// read as int64 bits (Cast wraps), where each result is exact: LEFT is
// x * 2^s with wraparound (2^s wraps to 0 from s = 64 on, and s >= 2^63
// reads as negative, for which the integer power gives 0), cast back to the
// dtype, which keeps the low bits; RIGHT is x / 2^s, truncating division of
// a non-negative value (a divisor of 0 gives 0, as a shift past the width
// does). uint64 x of 2^63 and more reads as negative, so RIGHT first halves
// it exactly (the even part halved, plus 2^63 where it was negative, gives
// the unsigned x >> 1) and divides that by 2^(s - 1); s = 0 keeps x.
void convert_bitshift(NodeContext& n) {
  const DType t = n.type(0).dtype;
  KILN_CHECK(t == n.type(1).dtype, TypeError, "inputs of different dtypes: {} and {}", dtype_name(t),
             dtype_name(n.type(1).dtype));
  KILN_CHECK(t == DType::kUint8 || t == DType::kUint16 || t == DType::kUint32 || t == DType::kUint64, TypeError,
             "BitShift takes uint8, uint16, uint32 or uint64, got {}", dtype_name(t));
  const std::string direction = n.attr_string("direction", "");
  KILN_CHECK(direction == "LEFT" || direction == "RIGHT", ValueError, "direction must be LEFT or RIGHT, got '{}'",
             direction);
  ir::Entry x = cast_to(n, n.input(0), DType::kInt64), s = cast_to(n, n.input(1), DType::kInt64);
  ir::Entry y;
  if (direction == "LEFT") {
    y = n.op1(OpId::kBroadcastMul, {x, scalar_op(n, OpId::kRPowerScalar, s, 2.0)});
  } else if (t != DType::kUint64) {
    y = n.op1(OpId::kBroadcastDiv, {x, scalar_op(n, OpId::kRPowerScalar, s, 2.0)});
  } else {
    ir::Entry even =
        n.op1(OpId::kBroadcastSub,
              {x, n.op1(OpId::kBroadcastMod, {x, n.constant(nd::full(Shape{}, 2, {.dtype = DType::kInt64}))})});
    ir::Entry half = scalar_op(n, OpId::kDivScalar, even, 2.0);
    ir::Entry negative = scalar_op(n, OpId::kLesserScalar, x, 0.0);
    half = n.op1(OpId::kWhere, {negative, scalar_op(n, OpId::kMinusScalar, half, -0x1p63), half});  // + 2^63, wrapping
    ir::Entry shifted = n.op1(OpId::kBroadcastDiv,
                              {half, scalar_op(n, OpId::kRPowerScalar, scalar_op(n, OpId::kMinusScalar, s, 1.0), 2.0)});
    y = n.op1(OpId::kWhere, {scalar_op(n, OpId::kEqualScalar, s, 0.0), x, shifted});
  }
  n.set_output(0, cast_to(n, y, t));
}

// IsNaN: x != x. IsInf: x == +inf and/or x == -inf (|x| == inf for both);
// detecting neither compares with NaN, which nothing equals. Both as bool.
void convert_isnan(NodeContext& n) {
  ir::Entry y = n.op1(OpId::kBroadcastNotEqual, {n.input(0), n.input(0)});
  n.set_output(0, n.op1(OpId::kCast, {y}, CastAttrs{.dtype = DType::kBool}));
}
void convert_isinf(NodeContext& n) {
  const bool pos = n.attr_int("detect_positive", 1) != 0, neg = n.attr_int("detect_negative", 1) != 0;
  const double inf = std::numeric_limits<double>::infinity();
  ir::Entry x = n.input(0);
  double value = std::numeric_limits<double>::quiet_NaN();
  if (pos && neg) {
    x = n.op1(OpId::kAbs, {x});
    value = inf;
  } else if (pos || neg) {
    value = pos ? inf : -inf;
  }
  ir::Entry y = n.op1(OpId::kEqualScalar, {x}, ScalarAttrs{.scalar = value});
  n.set_output(0, n.op1(OpId::kCast, {y}, CastAttrs{.dtype = DType::kBool}));
}

// Pow: the result has the base's dtype, the exponent may have another. A
// floating base takes the exponent cast to its dtype; an integer base with
// another exponent dtype computes in float64 and truncates back (exact for
// the integers a float64 power represents).
void convert_pow(NodeContext& n) {
  const DType base = n.type(0).dtype, exponent = n.type(1).dtype;
  if (base == exponent) {
    n.set_output(0, n.op1(OpId::kBroadcastPower, {n.input(0), n.input(1)}));
    return;
  }
  if (is_floating(base)) {
    n.set_output(0, n.op1(OpId::kBroadcastPower, {n.input(0), cast_to(n, n.input(1), base)}));
    return;
  }
  ir::Entry y = n.op1(OpId::kBroadcastPower, {cast_to(n, n.input(0), DType::kFloat64), cast_to(n, n.input(1), DType::kFloat64)});
  n.set_output(0, cast_to(n, y, base));
}

// Clip: bounds as attributes before opset 11, as optional inputs after.
void convert_clip(NodeContext& n) {
  const double lowest = std::numeric_limits<float>::lowest(), highest = std::numeric_limits<float>::max();
  // Integers: bounds saturate to the dtype's range (Kiln's clip), so the float defaults mean "none".
  const DType t = n.type(0).dtype;
  if (!is_floating(t) && !is_integral(t)) n.unsupported(fmt::format("Clip of {}", dtype_name(t)));
  if (n.opset() < 11) {
    ClipAttrs a{.a_min = n.attr_float("min", lowest), .a_max = n.attr_float("max", highest)};
    n.set_output(0, n.op1(OpId::kClip, {n.input(0)}, a));
    return;
  }
  bool lo_known = !n.has_input(1) || n.is_known(1), hi_known = !n.has_input(2) || n.is_known(2);
  if (lo_known && hi_known) {
    ClipAttrs a{.a_min = n.has_input(1) ? n.known_doubles(1, "min").at(0) : lowest,
                .a_max = n.has_input(2) ? n.known_doubles(2, "max").at(0) : highest};
    n.set_output(0, n.op1(OpId::kClip, {n.input(0)}, a));
    return;
  }
  // Bounds computed from data: min(max(x, lo), hi), the same where lo <= hi.
  ir::Entry y = n.input(0);
  if (n.has_input(1)) y = n.op1(OpId::kBroadcastMaximum, {y, n.input(1)});
  if (n.has_input(2)) y = n.op1(OpId::kBroadcastMinimum, {y, n.input(2)});
  n.set_output(0, y);
}

void convert_cast(NodeContext& n) {
  auto to = static_cast<int32_t>(n.attr_int("to", 0));
  std::optional<DType> dtype = dtype_from_onnx(to);
  if (!dtype) n.unsupported(fmt::format("Cast to {}", onnx_dtype_name(to)));
  if (*dtype == n.type(0).dtype) {
    n.set_output(0, n.input(0));
    return;
  }
  n.set_output(0, n.op1(OpId::kCast, {n.input(0)}, CastAttrs{.dtype = *dtype}));
}

void convert_where(NodeContext& n) { n.set_output(0, n.op1(OpId::kWhere, {n.input(0), n.input(1), n.input(2)})); }

// Comparisons: Kiln's give 1/0 in the inputs' dtype, ONNX's bool.
template <OpId kId>
void convert_compare(NodeContext& n) {
  KILN_CHECK(n.type(0).dtype == n.type(1).dtype, TypeError, "inputs of different dtypes: {} and {}",
             dtype_name(n.type(0).dtype), dtype_name(n.type(1).dtype));
  ir::Entry y = n.op1(kId, {n.input(0), n.input(1)});
  n.set_output(0, n.op1(OpId::kCast, {y}, CastAttrs{.dtype = DType::kBool}));
}

// Logic on bool tensors through uint8 arithmetic: And = a * b, Or = max(a, b),
// Xor = (a != b), Not = (a == 0).
ir::Entry as_u8(NodeContext& n, size_t i) {
  KILN_CHECK(n.type(i).dtype == DType::kBool, TypeError, "input {} must be bool, got {}", i, dtype_name(n.type(i).dtype));
  return n.op1(OpId::kCast, {n.input(i)}, CastAttrs{.dtype = DType::kUint8});
}
template <OpId kId>
void convert_logic(NodeContext& n) {
  ir::Entry y = n.op1(kId, {as_u8(n, 0), as_u8(n, 1)});
  n.set_output(0, n.op1(OpId::kCast, {y}, CastAttrs{.dtype = DType::kBool}));
}
void convert_not(NodeContext& n) {
  ir::Entry y = n.op1(OpId::kEqualScalar, {as_u8(n, 0)}, ScalarAttrs{.scalar = 0});
  n.set_output(0, n.op1(OpId::kCast, {y}, CastAttrs{.dtype = DType::kBool}));
}

// Whether uint64 a > b, elementwise with broadcasting, as float64 0/1. No
// Kiln type holds every uint64 and computes, so each value is split into
// exact halves: lo = x mod 2^32 (Cast to uint32 wraps) and hi = x - lo, a
// multiple of 2^32 that float64 holds exactly once the bits are read as
// int64 (Cast wraps: negative for x >= 2^63, then 2^64 is added back).
// Then a > b is hi_a > hi_b, or hi_a == hi_b and lo_a > lo_b.
ir::Entry uint64_greater(NodeContext& n, ir::Entry a, ir::Entry b) {
  auto halves = [&](ir::Entry x) {
    ir::Entry lo = cast_to(n, cast_to(n, x, DType::kUint32), DType::kInt64);
    ir::Entry hi = cast_to(n, n.op1(OpId::kBroadcastSub, {cast_to(n, x, DType::kInt64), lo}), DType::kFloat64);
    ir::Entry negative = n.op1(OpId::kLesserScalar, {hi}, ScalarAttrs{.scalar = 0.0});
    hi = n.op1(OpId::kWhere, {negative, n.op1(OpId::kPlusScalar, {hi}, ScalarAttrs{.scalar = 0x1p64}), hi});
    return std::pair{hi, cast_to(n, lo, DType::kFloat64)};
  };
  auto [hi_a, lo_a] = halves(a);
  auto [hi_b, lo_b] = halves(b);
  ir::Entry tie_then_lo = n.op1(OpId::kBroadcastMul, {n.op1(OpId::kBroadcastEqual, {hi_a, hi_b}),
                                                      n.op1(OpId::kBroadcastGreater, {lo_a, lo_b})});
  return n.op1(OpId::kBroadcastAdd, {n.op1(OpId::kBroadcastGreater, {hi_a, hi_b}), tie_then_lo});
}

// Sum, Max, Min, Mean of any number of inputs, broadcasting pairwise. Max
// and Min of int16, uint16 and uint32 (dtypes Kiln stores but does not
// compute in) run in int64, which holds every value, and cast back; of
// uint64 (which int64 would not hold), they select by uint64_greater.
template <OpId kId>
void convert_variadic(NodeContext& n) {
  const DType t = n.type(0).dtype;
  if ((kId == OpId::kBroadcastMaximum || kId == OpId::kBroadcastMinimum) && t == DType::kUint64) {
    ir::Entry y = n.input(0);
    for (size_t i = 1; i < n.num_inputs(); ++i) {
      ir::Entry greater = uint64_greater(n, y, n.input(i));
      y = kId == OpId::kBroadcastMaximum ? n.op1(OpId::kWhere, {greater, y, n.input(i)})
                                         : n.op1(OpId::kWhere, {greater, n.input(i), y});
    }
    n.set_output(0, y);
    return;
  }
  const bool widen = (kId == OpId::kBroadcastMaximum || kId == OpId::kBroadcastMinimum) &&
                     (t == DType::kInt16 || t == DType::kUint16 || t == DType::kUint32);
  auto in = [&](size_t i) {
    return widen ? n.op1(OpId::kCast, {n.input(i)}, CastAttrs{.dtype = DType::kInt64}) : n.input(i);
  };
  ir::Entry y = in(0);
  for (size_t i = 1; i < n.num_inputs(); ++i) y = n.op1(kId, {y, in(i)});
  if (n.op_type() == "Mean" && n.num_inputs() > 1)
    y = n.op1(OpId::kDivScalar, {y}, ScalarAttrs{.scalar = static_cast<double>(n.num_inputs())});
  if (widen) y = n.op1(OpId::kCast, {y}, CastAttrs{.dtype = t});
  n.set_output(0, y);
}

KILN_ONNX_CONVERTER("Add", convert_binary<OpId::kBroadcastAdd>);
KILN_ONNX_CONVERTER("Sub", convert_binary<OpId::kBroadcastSub>);
KILN_ONNX_CONVERTER("Mul", convert_binary<OpId::kBroadcastMul>);
KILN_ONNX_CONVERTER("Div", convert_binary<OpId::kBroadcastDiv>);
KILN_ONNX_CONVERTER("Pow", convert_pow);
KILN_ONNX_CONVERTER("Exp", convert_unary<OpId::kExp>);
KILN_ONNX_CONVERTER("Log", convert_unary<OpId::kLog>);
KILN_ONNX_CONVERTER("Sqrt", convert_unary<OpId::kSqrt>);
KILN_ONNX_CONVERTER("Erf", convert_unary<OpId::kErf>);
KILN_ONNX_CONVERTER("Sin", convert_unary<OpId::kSin>);
KILN_ONNX_CONVERTER("Cos", convert_unary<OpId::kCos>);
KILN_ONNX_CONVERTER("Tan", convert_unary<OpId::kTan>);
KILN_ONNX_CONVERTER("Asin", convert_unary<OpId::kArcsin>);
KILN_ONNX_CONVERTER("Acos", convert_unary<OpId::kArccos>);
KILN_ONNX_CONVERTER("Atan", convert_unary<OpId::kArctan>);
KILN_ONNX_CONVERTER("Sinh", convert_unary<OpId::kSinh>);
KILN_ONNX_CONVERTER("Cosh", convert_unary<OpId::kCosh>);
KILN_ONNX_CONVERTER("Asinh", convert_unary<OpId::kArcsinh>);
KILN_ONNX_CONVERTER("Acosh", convert_unary<OpId::kArccosh>);
KILN_ONNX_CONVERTER("Atanh", convert_unary<OpId::kArctanh>);
KILN_ONNX_CONVERTER("Round", convert_unary<OpId::kRint>);  // halves to even
KILN_ONNX_CONVERTER("Ceil", convert_unary<OpId::kCeil>);
KILN_ONNX_CONVERTER("Floor", convert_unary<OpId::kFloor>);
KILN_ONNX_CONVERTER("Sign", convert_unary<OpId::kSign>);
KILN_ONNX_CONVERTER("IsNaN", convert_isnan);
KILN_ONNX_CONVERTER("IsInf", convert_isinf);
KILN_ONNX_CONVERTER("Mod", convert_mod);
KILN_ONNX_CONVERTER("BitShift", convert_bitshift);
KILN_ONNX_CONVERTER("Abs", convert_unary<OpId::kAbs>);
KILN_ONNX_CONVERTER("Neg", convert_unary<OpId::kNegative>);
KILN_ONNX_CONVERTER("Reciprocal", convert_reciprocal);
KILN_ONNX_CONVERTER("Clip", convert_clip);
KILN_ONNX_CONVERTER("Cast", convert_cast);
KILN_ONNX_CONVERTER("Where", convert_where);
KILN_ONNX_CONVERTER("And", convert_logic<OpId::kBroadcastMul>);
KILN_ONNX_CONVERTER("Or", convert_logic<OpId::kBroadcastMaximum>);
KILN_ONNX_CONVERTER("Xor", convert_logic<OpId::kBroadcastNotEqual>);
KILN_ONNX_CONVERTER("Not", convert_not);
KILN_ONNX_CONVERTER("Equal", convert_compare<OpId::kBroadcastEqual>);
KILN_ONNX_CONVERTER("Greater", convert_compare<OpId::kBroadcastGreater>);
KILN_ONNX_CONVERTER("GreaterOrEqual", convert_compare<OpId::kBroadcastGreaterEqual>);
KILN_ONNX_CONVERTER("Less", convert_compare<OpId::kBroadcastLesser>);
KILN_ONNX_CONVERTER("LessOrEqual", convert_compare<OpId::kBroadcastLesserEqual>);
KILN_ONNX_CONVERTER("Sum", convert_variadic<OpId::kBroadcastAdd>);
KILN_ONNX_CONVERTER("Mean", convert_variadic<OpId::kBroadcastAdd>);
KILN_ONNX_CONVERTER("Max", convert_variadic<OpId::kBroadcastMaximum>);
KILN_ONNX_CONVERTER("Min", convert_variadic<OpId::kBroadcastMinimum>);

}  // namespace
}  // namespace kiln::onnx
