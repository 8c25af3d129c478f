// OpDefs of the elemwise family (attributes and dtype rules: ir/ops/elemwise.h;
// CPU kernels: backends/cpu/elemwise*.cc).
#include "ir/ops/elemwise.h"

#include "ir/op.h"

namespace kiln {
namespace {

// The dtypes of arithmetic, comparison and the integer-capable unary ops.
bool is_numeric(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBfloat16:
    case DType::kUint8:
    case DType::kInt8:
    case DType::kInt32:
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

void check_numeric(DType t) {
  KILN_CHECK(is_numeric(t), TypeError,
             "dtype {} is not supported (expected float32, float64, float16, bfloat16, uint8, int8, int32 or int64)",
             t);
}

void check_same_dtype(const TensorType& lhs, const TensorType& rhs, const char* what) {
  KILN_CHECK(lhs.dtype == rhs.dtype, TypeError, "{} must have the same dtype, got {} and {}", what, lhs.dtype,
             rhs.dtype);
}

void infer_same_shape(const OpAttrs&, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_same_dtype(in[0], in[1], "lhs and rhs");
  check_numeric(in[0].dtype);
  KILN_CHECK(in[0].shape == in[1].shape, ShapeError,
             "lhs shape {} and rhs shape {} must be equal (the broadcast_* ops broadcast)", in[0].shape, in[1].shape);
  out.push_back(in[0]);
}

void infer_broadcast(const OpAttrs&, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_same_dtype(in[0], in[1], "lhs and rhs");
  check_numeric(in[0].dtype);
  out.push_back({broadcast_shapes(in[0].shape, in[1].shape, "lhs and rhs"), in[0].dtype});
}

// broadcast_mod and broadcast_fmod: the numeric dtypes and uint64 (whose
// remainders no other dtype holds exactly).
void infer_broadcast_mod(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  if (in[0].dtype != DType::kUint64 || in[1].dtype != DType::kUint64) return infer_broadcast(attrs, in, out);
  out.push_back({broadcast_shapes(in[0].shape, in[1].shape, "lhs and rhs"), in[0].dtype});
}

void infer_numeric_unary(const OpAttrs&, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_numeric(in[0].dtype);
  out.push_back(in[0]);
}

void infer_float_unary(const OpAttrs&, std::span<const TensorType> in, std::vector<TensorType>& out) {
  KILN_CHECK(is_floating(in[0].dtype), TypeError,
             "expected a floating-point input (float32, float64, float16 or bfloat16), got {}", in[0].dtype);
  out.push_back(in[0]);
}

void infer_any_unary(const OpAttrs&, std::span<const TensorType> in, std::vector<TensorType>& out) {
  out.push_back(in[0]);
}

void infer_cast(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  out.push_back({in[0].shape, attrs.as<CastAttrs>().dtype});
}

void infer_where(const OpAttrs&, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_same_dtype(in[1], in[2], "x and y");
  Shape s = broadcast_shapes(in[0].shape, in[1].shape, "condition and x");
  s = broadcast_shapes(s, in[2].shape, "condition, x and y");
  out.push_back({s, in[1].dtype});
}

OpDef& define_binary(OpRegistry& r, OpId id, std::string_view doc, InferFn infer) {
  OpDef& d = r.define(id, doc);
  d.num_inputs = 2;
  d.input_names = {"lhs", "rhs"};
  d.infer = infer;
  return d;
}

OpDef& define_unary(OpRegistry& r, OpId id, std::string_view doc, InferFn infer) {
  OpDef& d = r.define(id, doc);
  d.num_inputs = 1;
  d.input_names = {"data"};
  d.infer = infer;
  d.inplace = {{0, 0}};
  return d;
}

void define_scalar(OpRegistry& r, OpId id, std::string_view doc, bool differentiable = true) {
  OpDef& d = define_unary(r, id, doc, infer_numeric_unary);
  d.parse_attrs = parse_attrs_as<ScalarAttrs>;
  d.differentiable = differentiable;
}

void define_elemwise_binary(OpRegistry& r) {
  const std::pair<OpId, std::string_view> same_shape[] = {
      {OpId::kElemwiseAdd, "lhs + rhs for arrays of equal shape."},
      {OpId::kElemwiseSub, "lhs - rhs for arrays of equal shape."},
      {OpId::kElemwiseMul, "lhs * rhs for arrays of equal shape."},
      {OpId::kElemwiseDiv, "lhs / rhs for arrays of equal shape."},
  };
  for (auto [id, doc] : same_shape) define_binary(r, id, doc, infer_same_shape).inplace = {{0, 0}};

  const std::pair<OpId, std::string_view> arithmetic[] = {
      {OpId::kBroadcastAdd, "lhs + rhs with NumPy broadcasting."},
      {OpId::kBroadcastSub, "lhs - rhs with NumPy broadcasting."},
      {OpId::kBroadcastMul, "lhs * rhs with NumPy broadcasting."},
      {OpId::kBroadcastDiv, "lhs / rhs with NumPy broadcasting."},
      {OpId::kBroadcastPower, "lhs ** rhs with NumPy broadcasting."},
      {OpId::kBroadcastMaximum, "Elementwise maximum with NumPy broadcasting (NaN propagates)."},
      {OpId::kBroadcastMinimum, "Elementwise minimum with NumPy broadcasting (NaN propagates)."},
  };
  for (auto [id, doc] : arithmetic) define_binary(r, id, doc, infer_broadcast);
  define_binary(r, OpId::kBroadcastMod,
                "lhs mod rhs with NumPy broadcasting: the remainder of floor division, with the sign of "
                "rhs (NumPy's mod; integer rhs 0 gives 0, floating-point rhs 0 gives NaN). Also takes uint64.",
                infer_broadcast_mod);
  define_binary(r, OpId::kBroadcastFmod,
                "C's fmod(lhs, rhs) with NumPy broadcasting: the remainder of truncated division, with the "
                "sign of lhs (integer rhs 0 gives 0, floating-point rhs 0 gives NaN). Also takes uint64.",
                infer_broadcast_mod);

  const std::pair<OpId, std::string_view> comparisons[] = {
      {OpId::kBroadcastEqual, "1 where lhs == rhs, else 0, in the input dtype, with broadcasting."},
      {OpId::kBroadcastNotEqual, "1 where lhs != rhs, else 0, in the input dtype, with broadcasting."},
      {OpId::kBroadcastGreater, "1 where lhs > rhs, else 0, in the input dtype, with broadcasting."},
      {OpId::kBroadcastGreaterEqual, "1 where lhs >= rhs, else 0, in the input dtype, with broadcasting."},
      {OpId::kBroadcastLesser, "1 where lhs < rhs, else 0, in the input dtype, with broadcasting."},
      {OpId::kBroadcastLesserEqual, "1 where lhs <= rhs, else 0, in the input dtype, with broadcasting."},
  };
  for (auto [id, doc] : comparisons) define_binary(r, id, doc, infer_broadcast).differentiable = false;
}

void define_scalar_ops(OpRegistry& r) {
  define_scalar(r, OpId::kPlusScalar, "x + scalar.");
  define_scalar(r, OpId::kMinusScalar, "x - scalar.");
  define_scalar(r, OpId::kRMinusScalar, "scalar - x.");
  define_scalar(r, OpId::kMulScalar, "x * scalar.");
  define_scalar(r, OpId::kDivScalar, "x / scalar.");
  define_scalar(r, OpId::kRDivScalar, "scalar / x.");
  define_scalar(r, OpId::kPowerScalar, "x ** scalar.");
  define_scalar(r, OpId::kRPowerScalar, "scalar ** x.");
  define_scalar(r, OpId::kMaximumScalar, "max(x, scalar) (NaN propagates).");
  define_scalar(r, OpId::kMinimumScalar, "min(x, scalar) (NaN propagates).");
  define_scalar(r, OpId::kEqualScalar, "1 where x == scalar, else 0, in the input dtype.", false);
  define_scalar(r, OpId::kNotEqualScalar, "1 where x != scalar, else 0, in the input dtype.", false);
  define_scalar(r, OpId::kGreaterScalar, "1 where x > scalar, else 0, in the input dtype.", false);
  define_scalar(r, OpId::kGreaterEqualScalar, "1 where x >= scalar, else 0, in the input dtype.", false);
  define_scalar(r, OpId::kLesserScalar, "1 where x < scalar, else 0, in the input dtype.", false);
  define_scalar(r, OpId::kLesserEqualScalar, "1 where x <= scalar, else 0, in the input dtype.", false);
}

void define_unary_ops(OpRegistry& r) {
  define_unary(r, OpId::kExp, "e ** x (floating-point inputs).", infer_float_unary);
  define_unary(r, OpId::kLog, "Natural logarithm (floating-point inputs).", infer_float_unary);
  define_unary(r, OpId::kSqrt, "Square root (floating-point inputs).", infer_float_unary);
  define_unary(r, OpId::kSquare, "x * x.", infer_numeric_unary);
  define_unary(r, OpId::kTanh, "Hyperbolic tangent (floating-point inputs).", infer_float_unary);
  define_unary(r, OpId::kErf, "The Gauss error function, 2/sqrt(pi) * integral of exp(-t^2) from 0 to x (floating-point "
                              "inputs).",
               infer_float_unary);
  define_unary(r, OpId::kSigmoid, "1 / (1 + exp(-x)) (floating-point inputs).", infer_float_unary);
  const std::pair<OpId, std::string_view> floating[] = {
      {OpId::kSin, "Sine (floating-point inputs)."},
      {OpId::kCos, "Cosine (floating-point inputs)."},
      {OpId::kTan, "Tangent (floating-point inputs)."},
      {OpId::kArcsin, "Inverse sine, NaN outside [-1, 1] (floating-point inputs)."},
      {OpId::kArccos, "Inverse cosine, NaN outside [-1, 1] (floating-point inputs)."},
      {OpId::kArctan, "Inverse tangent (floating-point inputs)."},
      {OpId::kSinh, "Hyperbolic sine (floating-point inputs)."},
      {OpId::kCosh, "Hyperbolic cosine (floating-point inputs)."},
      {OpId::kArcsinh, "Inverse hyperbolic sine (floating-point inputs)."},
      {OpId::kArccosh, "Inverse hyperbolic cosine, NaN below 1 (floating-point inputs)."},
      {OpId::kArctanh, "Inverse hyperbolic tangent, NaN outside [-1, 1] (floating-point inputs)."},
  };
  for (auto [id, doc] : floating) define_unary(r, id, doc, infer_float_unary);
  // Piecewise constant: no gradient flows through them (MXNet's is zero).
  const std::pair<OpId, std::string_view> rounding[] = {
      {OpId::kRound, "x rounded to the nearest integer, halves away from zero (floating-point inputs)."},
      {OpId::kRint, "x rounded to the nearest integer, halves to even (floating-point inputs)."},
      {OpId::kCeil, "The smallest integer not below x (floating-point inputs)."},
      {OpId::kFloor, "The largest integer not above x (floating-point inputs)."},
  };
  for (auto [id, doc] : rounding) define_unary(r, id, doc, infer_float_unary).differentiable = false;
  define_unary(r, OpId::kSign, "1 for x > 0, -1 for x < 0, x itself for zeros and NaN.", infer_numeric_unary)
      .differentiable = false;
  define_unary(r, OpId::kRelu, "max(x, 0).", infer_numeric_unary);
  define_unary(r, OpId::kAbs, "Absolute value.", infer_numeric_unary);
  define_unary(r, OpId::kNegative, "-x.", infer_numeric_unary);
  define_unary(r, OpId::kClip, "min(max(x, a_min), a_max).", infer_numeric_unary).parse_attrs =
      parse_attrs_as<ClipAttrs>;
  define_unary(r, OpId::kCopy, "A copy of x (any dtype).", infer_any_unary);
  define_unary(r, OpId::kBlockGrad, "x, through which no gradient flows (detach, stop_gradient).", infer_any_unary);

  OpDef& cast = r.define(OpId::kCast, "x converted to `dtype` (any dtype to any dtype).");
  cast.input_names = {"data"};
  cast.infer = infer_cast;
  cast.parse_attrs = parse_attrs_as<CastAttrs>;

  OpDef& where = r.define(OpId::kWhere, "x where condition is nonzero, else y, with broadcasting of all three.");
  where.num_inputs = 3;
  where.input_names = {"condition", "x", "y"};
  where.infer = infer_where;
}

// Names older MXNet versions and Gluon write in graph JSON.
void define_aliases(OpRegistry& r) {
  const std::pair<std::string_view, OpId> aliases[] = {
      {"_Plus", OpId::kElemwiseAdd},
      {"_plus", OpId::kElemwiseAdd},
      {"_add", OpId::kElemwiseAdd},
      {"_Minus", OpId::kElemwiseSub},
      {"_minus", OpId::kElemwiseSub},
      {"_sub", OpId::kElemwiseSub},
      {"_Mul", OpId::kElemwiseMul},
      {"_mul", OpId::kElemwiseMul},
      {"_Div", OpId::kElemwiseDiv},
      {"_div", OpId::kElemwiseDiv},
      {"broadcast_plus", OpId::kBroadcastAdd},
      {"broadcast_minus", OpId::kBroadcastSub},
      // The same-shape forms of these are a subset of the broadcasting ops.
      {"_Power", OpId::kBroadcastPower},
      {"_power", OpId::kBroadcastPower},
      {"_Maximum", OpId::kBroadcastMaximum},
      {"_maximum", OpId::kBroadcastMaximum},
      {"_Minimum", OpId::kBroadcastMinimum},
      {"_minimum", OpId::kBroadcastMinimum},
      {"_Mod", OpId::kBroadcastMod},
      {"_mod", OpId::kBroadcastMod},
      {"_equal", OpId::kBroadcastEqual},
      {"_not_equal", OpId::kBroadcastNotEqual},
      {"_greater", OpId::kBroadcastGreater},
      {"_greater_equal", OpId::kBroadcastGreaterEqual},
      {"_lesser", OpId::kBroadcastLesser},
      {"_lesser_equal", OpId::kBroadcastLesserEqual},
      {"_PlusScalar", OpId::kPlusScalar},
      {"_MinusScalar", OpId::kMinusScalar},
      {"_RMinusScalar", OpId::kRMinusScalar},
      {"_MulScalar", OpId::kMulScalar},
      {"_DivScalar", OpId::kDivScalar},
      {"_RDivScalar", OpId::kRDivScalar},
      {"_PowerScalar", OpId::kPowerScalar},
      {"_RPowerScalar", OpId::kRPowerScalar},
      {"_MaximumScalar", OpId::kMaximumScalar},
      {"_MinimumScalar", OpId::kMinimumScalar},
      {"_EqualScalar", OpId::kEqualScalar},
      {"_NotEqualScalar", OpId::kNotEqualScalar},
      {"_GreaterScalar", OpId::kGreaterScalar},
      {"_GreaterEqualScalar", OpId::kGreaterEqualScalar},
      {"_LesserScalar", OpId::kLesserScalar},
      {"_LesserEqualScalar", OpId::kLesserEqualScalar},
      {"identity", OpId::kCopy},
      {"_identity", OpId::kCopy},
      {"stop_gradient", OpId::kBlockGrad},
      {"cast", OpId::kCast},
      {"amp_cast", OpId::kCast},
  };
  for (auto [name, id] : aliases) r.alias(name, id);
}

}  // namespace

void register_elemwise_ops(OpRegistry& r) {
  define_elemwise_binary(r);
  define_scalar_ops(r);
  define_unary_ops(r);
  define_aliases(r);
}

}  // namespace kiln
