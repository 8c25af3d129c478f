#include "passes/fold_constants.h"

#include <cmath>
#include <limits>

#include "ir/ops/elemwise.h"
#include "ir/ops/elemwise_math.h"
#include "ir/ops/init.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"
#include "passes/graph_copy.h"
#include "passes/op_effects.h"
#include "passes/uniform_constant.h"

namespace kiln::passes {
namespace {

// How an op reads as one fused opcode (ir/ops/elemwise_math.h): its inputs in
// order, (x, scalar) for the *_scalar ops, (scalar, x) for their r-forms.
enum class Form { kInputs, kScalarAfter, kScalarBefore };
struct AsOpcode {
  FusedOpcode op;
  Form form = Form::kInputs;
};

std::optional<AsOpcode> as_opcode(const ir::Node& n) {
  using O = FusedOpcode;
  switch (n.op) {
    case OpId::kExp: return AsOpcode{O::kExp};
    case OpId::kLog: return AsOpcode{O::kLog};
    case OpId::kSqrt: return AsOpcode{O::kSqrt};
    case OpId::kSquare: return AsOpcode{O::kSquare};
    case OpId::kTanh: return AsOpcode{O::kTanh};
    case OpId::kSigmoid: return AsOpcode{O::kSigmoid};
    case OpId::kRelu: return AsOpcode{O::kRelu};
    case OpId::kAbs: return AsOpcode{O::kAbs};
    case OpId::kNegative: return AsOpcode{O::kNeg};
    case OpId::kWhere: return AsOpcode{O::kWhere};
    case OpId::kActivation:
      switch (n.attrs.as<ActivationAttrs>().act_type) {
        case ActType::kRelu: return AsOpcode{O::kRelu};
        case ActType::kSigmoid: return AsOpcode{O::kSigmoid};
        case ActType::kTanh: return AsOpcode{O::kTanh};
        case ActType::kSoftrelu: return AsOpcode{O::kSoftrelu};
        case ActType::kSoftsign: return AsOpcode{O::kSoftsign};
      }
      return std::nullopt;
    case OpId::kPlusScalar: return AsOpcode{O::kAdd, Form::kScalarAfter};
    case OpId::kMinusScalar: return AsOpcode{O::kSub, Form::kScalarAfter};
    case OpId::kRMinusScalar: return AsOpcode{O::kSub, Form::kScalarBefore};
    case OpId::kMulScalar: return AsOpcode{O::kMul, Form::kScalarAfter};
    case OpId::kDivScalar: return AsOpcode{O::kDiv, Form::kScalarAfter};
    case OpId::kRDivScalar: return AsOpcode{O::kDiv, Form::kScalarBefore};
    case OpId::kPowerScalar: return AsOpcode{O::kPow, Form::kScalarAfter};
    case OpId::kRPowerScalar: return AsOpcode{O::kPow, Form::kScalarBefore};
    case OpId::kMaximumScalar: return AsOpcode{O::kMax, Form::kScalarAfter};
    case OpId::kMinimumScalar: return AsOpcode{O::kMin, Form::kScalarAfter};
    case OpId::kEqualScalar: return AsOpcode{O::kEq, Form::kScalarAfter};
    case OpId::kNotEqualScalar: return AsOpcode{O::kNe, Form::kScalarAfter};
    case OpId::kGreaterScalar: return AsOpcode{O::kGt, Form::kScalarAfter};
    case OpId::kGreaterEqualScalar: return AsOpcode{O::kGe, Form::kScalarAfter};
    case OpId::kLesserScalar: return AsOpcode{O::kLt, Form::kScalarAfter};
    case OpId::kLesserEqualScalar: return AsOpcode{O::kLe, Form::kScalarAfter};
    case OpId::kElemwiseAdd:
    case OpId::kBroadcastAdd: return AsOpcode{O::kAdd};
    case OpId::kElemwiseSub:
    case OpId::kBroadcastSub: return AsOpcode{O::kSub};
    case OpId::kElemwiseMul:
    case OpId::kBroadcastMul: return AsOpcode{O::kMul};
    case OpId::kElemwiseDiv:
    case OpId::kBroadcastDiv: return AsOpcode{O::kDiv};
    case OpId::kBroadcastPower: return AsOpcode{O::kPow};
    case OpId::kBroadcastMaximum: return AsOpcode{O::kMax};
    case OpId::kBroadcastMinimum: return AsOpcode{O::kMin};
    case OpId::kBroadcastEqual: return AsOpcode{O::kEq};
    case OpId::kBroadcastNotEqual: return AsOpcode{O::kNe};
    case OpId::kBroadcastGreater: return AsOpcode{O::kGt};
    case OpId::kBroadcastGreaterEqual: return AsOpcode{O::kGe};
    case OpId::kBroadcastLesser: return AsOpcode{O::kLt};
    case OpId::kBroadcastLesserEqual: return AsOpcode{O::kLe};
    default: return std::nullopt;
  }
}

// The opcode's value in T (float for float32 nodes: what the kernels compute).
template <typename T>
double evaluate_as(AsOpcode e, const std::vector<double>& v, double scalar) {
  T x[3] = {};
  for (size_t i = 0; i < v.size() && i < 3; ++i) x[i] = static_cast<T>(v[i]);
  if (e.form == Form::kScalarAfter) x[1] = static_cast<T>(scalar);
  if (e.form == Form::kScalarBefore) {
    x[1] = x[0];
    x[0] = static_cast<T>(scalar);
  }
  return static_cast<double>(math::fused_eval<T>(e.op, x[0], x[1], x[2]));
}

// The ops of KILN_UNARY_MATH (ir/ops/elemwise_math.h) in T, as the kernels
// compute them; nullopt for any other op.
template <typename T>
std::optional<double> evaluate_math(OpId op, const std::vector<double>& v) {
  const T a = static_cast<T>(v[0]), b = v.size() > 1 ? static_cast<T>(v[1]) : T(0);
  switch (op) {
    case OpId::kSin: return math::op_sin(a);
    case OpId::kCos: return math::op_cos(a);
    case OpId::kTan: return math::op_tan(a);
    case OpId::kArcsin: return math::op_arcsin(a);
    case OpId::kArccos: return math::op_arccos(a);
    case OpId::kArctan: return math::op_arctan(a);
    case OpId::kSinh: return math::op_sinh(a);
    case OpId::kCosh: return math::op_cosh(a);
    case OpId::kArcsinh: return math::op_arcsinh(a);
    case OpId::kArccosh: return math::op_arccosh(a);
    case OpId::kArctanh: return math::op_arctanh(a);
    case OpId::kRound: return math::op_round(a);
    case OpId::kRint: return math::op_rint(a);
    case OpId::kCeil: return math::op_ceil(a);
    case OpId::kFloor: return math::op_floor(a);
    case OpId::kSign: return math::op_sign(a);
    case OpId::kBroadcastMod: return math::op_mod(a, b);
    case OpId::kBroadcastFmod: return math::op_fmod(a, b);
    default: return std::nullopt;
  }
}

// The value of `n` given the uniform values of its inputs, or nullopt if the
// op is not one this pass evaluates. Elementwise ops go through the scalar
// math the kernels share (ir/ops/elemwise_math.h), in float for float32
// nodes and in double for float64 ones.
std::optional<double> evaluate(const ir::Node& n, const std::vector<double>& v, const std::vector<TensorType>& in) {
  if (std::optional<AsOpcode> e = as_opcode(n)) {
    double scalar = e->form == Form::kInputs ? 0.0 : n.attrs.as<ScalarAttrs>().scalar;
    return n.types[0].dtype == DType::kFloat32 ? evaluate_as<float>(*e, v, scalar) : evaluate_as<double>(*e, v, scalar);
  }
  if (std::optional<double> m = n.types[0].dtype == DType::kFloat32 ? evaluate_math<float>(n.op, v)
                                                                    : evaluate_math<double>(n.op, v))
    return m;
  switch (n.op) {
    case OpId::kCopy:
    case OpId::kCast:
      return v[0];
    case OpId::kClip: {
      const auto& c = n.attrs.as<ClipAttrs>();
      return std::isnan(v[0]) ? v[0] : std::min(std::max(v[0], c.a_min), c.a_max);
    }
    case OpId::kAddN: {
      double s = 0;
      for (double x : v) s += x;
      return s;
    }
    // layout: every element is still the value
    case OpId::kReshape:
    case OpId::kTranspose:
    case OpId::kFlatten:
    case OpId::kExpandDims:
    case OpId::kBroadcastTo:
    case OpId::kSlice:
    case OpId::kSliceAxis:
      return v[0];
    case OpId::kConcat:
    case OpId::kStack:
      for (double x : v)
        if (!(x == v[0])) return std::nullopt;
      return v[0];
    // reductions over `count` equal elements
    case OpId::kSum:
    case OpId::kMean:
    case OpId::kMax:
    case OpId::kMin:
    case OpId::kProd:
    case OpId::kNorm: {
      int64_t out_size = n.types[0].shape.size();
      if (out_size == 0 || in[0].shape.size() == 0) return std::nullopt;  // empty reductions: not folded
      auto count = static_cast<double>(in[0].shape.size() / out_size);
      switch (n.op) {
        case OpId::kSum:
          return v[0] * count;
        case OpId::kProd:
          return std::pow(v[0], count);
        case OpId::kNorm:
          return n.attrs.as<NormAttrs>().ord == 1 ? std::fabs(v[0]) * count : std::fabs(v[0]) * std::sqrt(count);
        default:
          return v[0];  // mean, max, min
      }
    }
    default:
      return std::nullopt;
  }
}

}  // namespace

ir::Graph fold_constants(const ir::Graph& g, PassContext& ctx) {
  GraphCopy copy(g);
  int64_t folded = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    auto id = static_cast<ir::NodeId>(i);
    const ir::Node& n = g.node(id);
    const TensorType& out = n.types[0];
    bool candidate = n.is_op() && !n.inputs.empty() && n.num_outputs() == 1 && is_pure(op_def(n.op)) &&
                     (out.dtype == DType::kFloat32 || out.dtype == DType::kFloat64);
    std::vector<double> values;
    std::vector<TensorType> in_types;
    for (size_t k = 0; candidate && k < n.inputs.size(); ++k) {
      ir::Entry e = copy.map(n.inputs[k]);
      auto v = uniform_value(copy.graph(), e);
      candidate = v.has_value();
      if (candidate) values.push_back(*v);
      in_types.push_back(copy.graph().type(e));
    }
    std::optional<double> value = candidate ? evaluate(n, values, in_types) : std::nullopt;
    if (!value) {
      copy.copy_node(id);
      continue;
    }
    FullAttrs full;
    full.shape = out.shape;
    full.dtype = out.dtype;
    full.value = *value;
    copy.map_entry({id, 0}, copy.graph().add_op(OpId::kFull, OpAttrs::make(full), {}, n.name)[0]);
    ++folded;
  }
  PassStats& stats = ctx.current();
  stats.rewritten += folded;
  if (folded == 0) return g;
  stats.changed = true;
  return copy.finish();
}

}  // namespace kiln::passes
