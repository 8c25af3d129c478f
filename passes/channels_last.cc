#include "passes/channels_last.h"

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "ir/amp.h"
#include "ir/ops/conv.h"
#include "ir/ops/conv_layout.h"
#include "ir/ops/fused_layers.h"
#include "ir/ops/matrix.h"
#include "passes/graph_copy.h"

namespace kiln::passes {
namespace {

const IntTuple kToLast{0, 2, 3, 1};   // [N, C, H, W] -> [N, H, W, C] (weights: [F, C, kh, kw] -> [F, kh, kw, C])
const IntTuple kToFirst{0, 3, 1, 2};  // back

bool channel_first_2d(const std::optional<std::string>& layout) { return !layout || *layout == "NCHW"; }

// Ops whose output element i depends only on element i of each input, when
// every input has the output's shape.
bool pointwise(OpId op) {
  switch (op) {
    case OpId::kElemwiseAdd: case OpId::kElemwiseSub: case OpId::kElemwiseMul: case OpId::kElemwiseDiv:
    case OpId::kBroadcastAdd: case OpId::kBroadcastSub: case OpId::kBroadcastMul: case OpId::kBroadcastDiv:
    case OpId::kBroadcastPower: case OpId::kBroadcastMaximum: case OpId::kBroadcastMinimum:
    case OpId::kBroadcastEqual: case OpId::kBroadcastNotEqual: case OpId::kBroadcastGreater:
    case OpId::kBroadcastGreaterEqual: case OpId::kBroadcastLesser: case OpId::kBroadcastLesserEqual:
    case OpId::kBroadcastMod: case OpId::kBroadcastFmod:
    case OpId::kPlusScalar: case OpId::kMinusScalar: case OpId::kRMinusScalar: case OpId::kMulScalar:
    case OpId::kDivScalar: case OpId::kRDivScalar: case OpId::kPowerScalar: case OpId::kRPowerScalar:
    case OpId::kMaximumScalar: case OpId::kMinimumScalar: case OpId::kEqualScalar: case OpId::kNotEqualScalar:
    case OpId::kGreaterScalar: case OpId::kGreaterEqualScalar: case OpId::kLesserScalar:
    case OpId::kLesserEqualScalar:
    case OpId::kExp: case OpId::kLog: case OpId::kSqrt: case OpId::kSquare: case OpId::kTanh: case OpId::kErf:
    case OpId::kSigmoid: case OpId::kRelu: case OpId::kAbs: case OpId::kNegative: case OpId::kClip:
    case OpId::kCopy: case OpId::kCast: case OpId::kWhere: case OpId::kBlockGrad:
    case OpId::kSin: case OpId::kCos: case OpId::kTan: case OpId::kArcsin: case OpId::kArccos: case OpId::kArctan:
    case OpId::kSinh: case OpId::kCosh: case OpId::kArcsinh: case OpId::kArccosh: case OpId::kArctanh:
    case OpId::kRound: case OpId::kRint: case OpId::kCeil: case OpId::kFloor: case OpId::kSign:
    case OpId::kActivation: case OpId::kLeakyReLU: case OpId::kAddN: case OpId::kFusedElemwise:
      return true;
    default:
      return false;
  }
}

// Pooling that channel-last kernels compute as the channel-first ones do.
bool movable_pooling(const PoolingAttrs& a) {
  if (!channel_first_2d(a.layout)) return false;
  for (int i = 0; i < a.dilate.ndim(); ++i)
    if (a.dilate[i] != 1) return false;
  if (a.global_pool) return a.pool_type == "max" || a.pool_type == "avg";
  return (a.pool_type == "max" || a.pool_type == "avg") && a.pooling_convention == "valid";
}

class Mover {
 public:
  explicit Mover(const ir::Graph& g) : copy_(g) {}

  GraphCopy& copy() { return copy_; }
  int64_t moved = 0, added = 0;

  // The channel-last form of source entry `e`, if it has one.
  std::optional<ir::Entry> last(ir::Entry e) const {
    auto it = last_.find(key(e));
    if (it == last_.end()) return std::nullopt;
    return it->second;
  }

  // The channel-last form of source entry `e`, made now if it has none.
  ir::Entry to_last(ir::Entry e, const std::string& name) {
    if (auto l = last(e)) return *l;
    ir::Entry l = transpose(first(e), kToLast, name + "_to_nhwc");
    last_.emplace(key(e), l);
    return l;
  }

  // The channel-first form of source entry `e` (a transpose back when the
  // value exists only channel-last so far).
  ir::Entry first(ir::Entry e) {
    if (copy_.is_mapped(e)) return copy_.map(e);
    ir::Entry f = transpose(*last(e), kToFirst, copy_.source().node(e.node).name + "_to_nchw");
    copy_.map_entry(e, f);
    return f;
  }

  // A weight (a value of the new graph) as [F, kh, kw, C], once per value.
  ir::Entry weight_to_last(ir::Entry w, const std::string& name) {
    auto it = weights_.find(key(w));
    if (it != weights_.end()) return it->second;
    ir::Entry l = transpose(w, kToLast, name + "_weight_to_ohwi");
    weights_.emplace(key(w), l);
    return l;
  }

  void set_last(ir::Entry source, ir::Entry value) { last_.emplace(key(source), value); }

 private:
  static std::pair<ir::NodeId, int> key(ir::Entry e) { return {e.node, e.index}; }

  ir::Entry transpose(ir::Entry e, const IntTuple& axes, const std::string& name) {
    ++added;
    return copy_.graph().add_op(OpId::kTranspose, OpAttrs::make(TransposeAttrs{axes}), std::vector{e}, name)[0];
  }

  GraphCopy copy_;
  std::map<std::pair<ir::NodeId, int>, ir::Entry> last_;     // source entry -> channel-last value
  std::map<std::pair<ir::NodeId, int>, ir::Entry> weights_;  // new-graph weight -> its OHWI transpose
};

// Convolution or _kiln_conv_act with 4-D 16-bit channel-first data.
bool movable_convolution(const ir::Graph& g, const ir::Node& n) {
  if (n.op != OpId::kConvolution && n.op != OpId::kConvAct) return false;
  const TensorType& x = g.type(n.inputs[0]);
  const auto& layout = n.op == OpId::kConvAct ? n.attrs.as<ConvActAttrs>().layout : n.attrs.as<ConvolutionAttrs>().layout;
  return x.shape.ndim() == 4 && is_16bit_float(x.dtype) && channel_first_2d(layout);
}

template <typename Attrs>
OpAttrs with_layout(const OpAttrs& attrs) {
  Attrs a = attrs.as<Attrs>();
  a.layout = "NHWC";
  return OpAttrs::make(std::move(a));
}

// `n`'s inputs: data, weight, then bias and (fused) sum as present.
std::vector<ir::Entry> convolution_inputs(Mover& m, const ir::Node& n) {
  std::vector<ir::Entry> in{m.to_last(n.inputs[0], n.name), m.weight_to_last(m.first(n.inputs[1]), n.name)};
  const bool has_sum = n.op == OpId::kConvAct && n.attrs.as<ConvActAttrs>().with_sum;
  for (size_t i = 2; i < n.inputs.size(); ++i) {
    const bool sum = has_sum && i + 1 == n.inputs.size();
    in.push_back(sum ? m.to_last(n.inputs[i], n.name + "_sum") : m.first(n.inputs[i]));
  }
  return in;
}

// `n` on channel-last inputs, if every input has a channel-last form of its output's shape.
std::optional<std::vector<ir::Entry>> pointwise_inputs(const Mover& m, const ir::Graph& g, const ir::Node& n) {
  if (!pointwise(n.op) || n.num_outputs() != 1 || n.types[0].shape.ndim() != 4 || n.inputs.empty())
    return std::nullopt;
  std::vector<ir::Entry> in;
  for (const ir::Entry& e : n.inputs) {
    auto l = m.last(e);
    if (!l || g.type(e).shape != n.types[0].shape) return std::nullopt;
    in.push_back(*l);
  }
  return in;
}

}  // namespace

ir::Graph channels_last(const ir::Graph& g, PassContext& ctx) {
  PassStats& stats = ctx.current();
  bool any = false;
  for (const ir::Node& n : g.nodes()) any = any || (n.is_op() && movable_convolution(g, n));
  if (!any) return g;

  Mover m(g);
  ir::Graph& dst = m.copy().graph();
  for (size_t i = 0; i < g.size(); ++i) {
    const auto id = static_cast<ir::NodeId>(i);
    const ir::Node& n = g.node(id);
    std::optional<std::vector<ir::Entry>> in;
    OpAttrs attrs = n.attrs;
    if (!n.is_op()) {
      m.copy().copy_node(id);
      continue;
    }
    if (movable_convolution(g, n)) {
      in = convolution_inputs(m, n);
      attrs = n.op == OpId::kConvAct ? with_layout<ConvActAttrs>(n.attrs) : with_layout<ConvolutionAttrs>(n.attrs);
    } else if (n.op == OpId::kPooling && m.last(n.inputs[0]) && movable_pooling(n.attrs.as<PoolingAttrs>())) {
      in = std::vector{*m.last(n.inputs[0])};
      attrs = with_layout<PoolingAttrs>(n.attrs);
    } else {
      in = pointwise_inputs(m, g, n);
    }
    if (!in) {
      for (const ir::Entry& e : n.inputs) m.first(e);
      m.copy().copy_node(id);
      continue;
    }
    std::vector<ir::Entry> out;
    try {
      out = dst.add_op(n.op, attrs, *in, n.name);
    } catch (Error& e) {
      e.add_context(fmt::format("channels-last: node '{}'", n.name));
      throw;
    }
    m.set_last({id, 0}, out[0]);
    ++m.moved;
  }
  for (const ir::Entry& e : g.outputs()) m.first(e);
  stats.rewritten = m.moved;
  stats.added = m.added;
  stats.changed = m.moved > 0;
  return m.copy().finish();
}

}  // namespace kiln::passes
