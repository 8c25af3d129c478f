#include "passes/fold_constants.h"

#include <cmath>
#include <limits>

#include "ir/ops/elemwise.h"
#include "ir/ops/init.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"
#include "passes/graph_copy.h"
#include "passes/op_effects.h"
#include "passes/uniform_constant.h"

namespace kiln::passes {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// NaN-propagating maximum and minimum, as the kernels compute them.
double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b); }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// The value of `n` given the uniform values of its inputs, or nullopt if the
// op is not one this pass evaluates.
std::optional<double> evaluate(const ir::Node& n, const std::vector<double>& v, const std::vector<TensorType>& in) {
  auto scalar = [&] { return n.attrs.as<ScalarAttrs>().scalar; };
  switch (n.op) {
    // unary
    case OpId::kExp:
      return std::exp(v[0]);
    case OpId::kLog:
      return std::log(v[0]);
    case OpId::kSqrt:
      return std::sqrt(v[0]);
    case OpId::kSquare:
      return v[0] * v[0];
    case OpId::kTanh:
      return std::tanh(v[0]);
    case OpId::kSigmoid:
      return sigmoid(v[0]);
    case OpId::kRelu:
      return v[0] > 0 ? v[0] : 0.0;  // NaN -> 0, as the kernel
    case OpId::kAbs:
      return std::fabs(v[0]);
    case OpId::kNegative:
      return -v[0];
    case OpId::kCopy:
    case OpId::kCast:
      return v[0];
    case OpId::kClip: {
      const auto& c = n.attrs.as<ClipAttrs>();
      return std::isnan(v[0]) ? v[0] : std::min(std::max(v[0], c.a_min), c.a_max);
    }
    case OpId::kActivation:
      switch (n.attrs.as<ActivationAttrs>().act_type) {
        case ActType::kRelu:
          return v[0] > 0 ? v[0] : 0.0;
        case ActType::kSigmoid:
          return sigmoid(v[0]);
        case ActType::kTanh:
          return std::tanh(v[0]);
        case ActType::kSoftrelu:
          return std::log1p(std::exp(v[0]));
        case ActType::kSoftsign:
          return v[0] / (1 + std::fabs(v[0]));
      }
      return std::nullopt;
    // scalar
    case OpId::kPlusScalar:
      return v[0] + scalar();
    case OpId::kMinusScalar:
      return v[0] - scalar();
    case OpId::kRMinusScalar:
      return scalar() - v[0];
    case OpId::kMulScalar:
      return v[0] * scalar();
    case OpId::kDivScalar:
      return v[0] / scalar();
    case OpId::kRDivScalar:
      return scalar() / v[0];
    case OpId::kPowerScalar:
      return std::pow(v[0], scalar());
    case OpId::kRPowerScalar:
      return std::pow(scalar(), v[0]);
    case OpId::kMaximumScalar:
      return nan_max(v[0], scalar());
    case OpId::kMinimumScalar:
      return nan_min(v[0], scalar());
    case OpId::kEqualScalar:
      return v[0] == scalar() ? 1.0 : 0.0;
    case OpId::kNotEqualScalar:
      return v[0] != scalar() ? 1.0 : 0.0;
    case OpId::kGreaterScalar:
      return v[0] > scalar() ? 1.0 : 0.0;
    case OpId::kGreaterEqualScalar:
      return v[0] >= scalar() ? 1.0 : 0.0;
    case OpId::kLesserScalar:
      return v[0] < scalar() ? 1.0 : 0.0;
    case OpId::kLesserEqualScalar:
      return v[0] <= scalar() ? 1.0 : 0.0;
    // binary
    case OpId::kElemwiseAdd:
    case OpId::kBroadcastAdd:
      return v[0] + v[1];
    case OpId::kElemwiseSub:
    case OpId::kBroadcastSub:
      return v[0] - v[1];
    case OpId::kElemwiseMul:
    case OpId::kBroadcastMul:
      return v[0] * v[1];
    case OpId::kElemwiseDiv:
    case OpId::kBroadcastDiv:
      return v[0] / v[1];
    case OpId::kBroadcastPower:
      return std::pow(v[0], v[1]);
    case OpId::kBroadcastMaximum:
      return nan_max(v[0], v[1]);
    case OpId::kBroadcastMinimum:
      return nan_min(v[0], v[1]);
    case OpId::kBroadcastEqual:
      return v[0] == v[1] ? 1.0 : 0.0;
    case OpId::kBroadcastNotEqual:
      return v[0] != v[1] ? 1.0 : 0.0;
    case OpId::kBroadcastGreater:
      return v[0] > v[1] ? 1.0 : 0.0;
    case OpId::kBroadcastGreaterEqual:
      return v[0] >= v[1] ? 1.0 : 0.0;
    case OpId::kBroadcastLesser:
      return v[0] < v[1] ? 1.0 : 0.0;
    case OpId::kBroadcastLesserEqual:
      return v[0] <= v[1] ? 1.0 : 0.0;
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
