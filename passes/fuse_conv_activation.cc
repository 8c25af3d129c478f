#include "passes/fuse_conv_activation.h"

#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ir/ops/conv_layout.h"
#include "ir/ops/fused_layers.h"
#include "passes/graph_copy.h"

namespace kiln::passes {
namespace {

// How many op inputs read each entry, and which entries are graph outputs.
class Readers {
  template <typename T>
  static auto& at(T& v, ir::Entry e) {
    return v[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)];
  }

 public:
  explicit Readers(const ir::Graph& g) : counts_(g.size()), outputs_(g.size()) {
    for (size_t i = 0; i < g.size(); ++i) {
      counts_[i].assign(static_cast<size_t>(g.nodes()[i].num_outputs()), 0);
      outputs_[i].assign(static_cast<size_t>(g.nodes()[i].num_outputs()), false);
    }
    for (const ir::Node& n : g.nodes())
      for (const ir::Entry& e : n.inputs)
        if (e.node >= 0) ++at(counts_, e);
    for (const ir::Entry& e : g.outputs())
      if (e.node >= 0) at(outputs_, e) = true;
  }
  // Read by exactly one op input and not a graph output.
  bool read_once(ir::Entry e) const { return e.node >= 0 && at(counts_, e) == 1 && !at(outputs_, e); }

 private:
  std::vector<std::vector<int>> counts_;
  std::vector<std::vector<char>> outputs_;
};

// One chain to replace: layer [+ channel constant] [+ residual] -> activation.
struct Chain {
  ir::NodeId layer = -1;
  ActType act = ActType::kRelu;
  std::optional<ir::Entry> channel_bias;  // the broadcast_add operand, [1, C, 1, ...] or [C, 1, ...]
  std::optional<ir::Entry> sum;           // the residual
  std::vector<ir::NodeId> absorbed;       // the chain's nodes before the activation
};

std::optional<ActType> activation_of(const ir::Node& n) {
  if (!n.is_op()) return std::nullopt;
  std::optional<ActType> act;
  switch (n.op) {
    case OpId::kActivation:
      act = n.attrs.as<ActivationAttrs>().act_type;
      break;
    case OpId::kRelu:
      act = ActType::kRelu;
      break;
    case OpId::kSigmoid:
      act = ActType::kSigmoid;
      break;
    case OpId::kTanh:
      act = ActType::kTanh;
      break;
    default:
      break;
  }
  if (act && !fusable_activation(*act)) return std::nullopt;
  return act;
}

class Matcher {
 public:
  explicit Matcher(const ir::Graph& g) : g_(g), readers_(g) {}

  // The chain that ends in activation node `id`, if there is one.
  std::optional<Chain> match(ir::NodeId id) const {
    const ir::Node& act = g_.node(id);
    std::optional<ActType> type = activation_of(act);
    if (!type) return std::nullopt;
    Chain c;
    c.act = *type;
    ir::Entry x = act.inputs[0];
    if (!fusable_value(x)) return std::nullopt;
    const ir::Node& xn = g_.node(x.node);
    if (xn.op == OpId::kFullyConnected) {
      c.layer = x.node;
      c.absorbed = {x.node};
      return c;
    }
    if (conv_part(x, c)) return c;
    // relu(conv_part + residual), the residual on either side.
    if (!is_same_shape_add(xn)) return std::nullopt;
    for (int side : {0, 1}) {
      Chain with_sum = c;
      ir::Entry r = xn.inputs[static_cast<size_t>(1 - side)];
      if (!conv_part(xn.inputs[static_cast<size_t>(side)], with_sum)) continue;
      with_sum.sum = r;
      with_sum.absorbed.push_back(x.node);
      return with_sum;
    }
    return std::nullopt;
  }

 private:
  // An op's first output that the next op of a chain alone reads.
  bool fusable_value(ir::Entry e) const { return g_.node(e.node).is_op() && e.index == 0 && readers_.read_once(e); }

  bool is_same_shape_add(const ir::Node& n) const {
    if (n.op != OpId::kElemwiseAdd && n.op != OpId::kBroadcastAdd) return false;
    return g_.type(n.inputs[0]) == g_.type(n.inputs[1]) && g_.type(n.inputs[0]) == n.types[0];
  }

  // Convolution(...) or broadcast_add(Convolution(...), channel constant):
  // fills c.layer, c.channel_bias and c.absorbed.
  bool conv_part(ir::Entry e, Chain& c) const {
    if (!fusable_value(e)) return false;
    const ir::Node& n = g_.node(e.node);
    if (n.op == OpId::kConvolution && n.types[0].dtype == DType::kFloat32) {
      c.layer = e.node;
      c.absorbed.push_back(e.node);
      return true;
    }
    if (n.op != OpId::kBroadcastAdd) return false;
    for (int side : {0, 1}) {
      ir::Entry conv = n.inputs[static_cast<size_t>(side)], bias = n.inputs[static_cast<size_t>(1 - side)];
      if (!fusable_value(conv)) continue;
      const ir::Node& cn = g_.node(conv.node);
      if (cn.op != OpId::kConvolution || cn.types[0].dtype != DType::kFloat32) continue;
      if (channels_last(cn.attrs.as<ConvolutionAttrs>().layout)) continue;  // is_channel_vector is channel-first
      if (!is_channel_vector(g_.type(bias), cn.types[0]) || n.types[0] != cn.types[0]) continue;
      c.layer = conv.node;
      c.channel_bias = bias;
      c.absorbed.push_back(conv.node);
      c.absorbed.push_back(e.node);
      return true;
    }
    return false;
  }

  // `t`, aligned to the right of `out` [N, C, ...], is [1, C, 1, ...].
  static bool is_channel_vector(const TensorType& t, const TensorType& out) {
    if (t.dtype != out.dtype || t.shape.ndim() > out.shape.ndim() || t.shape.ndim() < out.shape.ndim() - 1)
      return false;
    const int lead = out.shape.ndim() - t.shape.ndim();
    for (int i = 0; i < t.shape.ndim(); ++i)
      if (t.shape[i] != (i + lead == 1 ? out.shape[1] : 1)) return false;
    return true;
  }

  const ir::Graph& g_;
  Readers readers_;
};

OpAttrs reshape_to(const Shape& s) {
  const OpDef& reshape = op_def(OpId::kReshape);
  return reshape.parse_attrs(reshape.name, {{"shape", s.to_mxnet_string()}});
}

// Appends the fused node of chain `c` (and the bias ops it needs) to the copy.
ir::Entry emit(GraphCopy& copy, const Chain& c) {
  const ir::Graph& src = copy.source();
  ir::Graph& dst = copy.graph();
  const ir::Node& layer = src.node(c.layer);
  std::vector<ir::Entry> in{copy.map(layer.inputs[0]), copy.map(layer.inputs[1])};
  if (layer.op == OpId::kFullyConnected) {
    FcActAttrs a;
    static_cast<FullyConnectedAttrs&>(a) = layer.attrs.as<FullyConnectedAttrs>();
    a.act_type = c.act;
    if (!a.no_bias) in.push_back(copy.map(layer.inputs[2]));
    return dst.add_op(OpId::kFcAct, OpAttrs::make(a), in, layer.name)[0];
  }
  ConvActAttrs a;
  static_cast<ConvolutionAttrs&>(a) = layer.attrs.as<ConvolutionAttrs>();
  a.act_type = c.act;
  std::optional<ir::Entry> bias;
  if (!a.no_bias) bias = copy.map(layer.inputs[2]);
  if (c.channel_bias) {
    ir::Entry v = dst.add_op(OpId::kReshape, reshape_to(Shape{a.num_filter}), std::vector{copy.map(*c.channel_bias)},
                             layer.name + "/channel_bias")[0];
    bias = bias ? dst.add_op(OpId::kElemwiseAdd, {}, std::vector{*bias, v}, layer.name + "/bias")[0] : v;
  }
  a.no_bias = !bias;
  if (bias) in.push_back(*bias);
  a.with_sum = c.sum.has_value();
  if (c.sum) in.push_back(copy.map(*c.sum));
  return dst.add_op(OpId::kConvAct, OpAttrs::make(a), in, layer.name)[0];
}

}  // namespace

ir::Graph fuse_conv_activation(const ir::Graph& g, PassContext& ctx) {
  if (ctx.options.train_mode) return g;
  const Matcher matcher(g);
  std::unordered_map<ir::NodeId, Chain> chains;  // by activation node
  std::unordered_set<ir::NodeId> absorbed;
  for (size_t i = 0; i < g.size(); ++i) {
    auto id = static_cast<ir::NodeId>(i);
    if (std::optional<Chain> c = matcher.match(id)) {
      absorbed.insert(c->absorbed.begin(), c->absorbed.end());
      chains.emplace(id, std::move(*c));
    }
  }
  if (chains.empty()) return g;

  GraphCopy copy(g);
  for (size_t i = 0; i < g.size(); ++i) {
    auto id = static_cast<ir::NodeId>(i);
    if (absorbed.contains(id)) continue;  // read only by its chain, which is emitted at the activation
    auto chain = chains.find(id);
    if (chain == chains.end()) {
      copy.copy_node(id);
      continue;
    }
    copy.map_entry({id, 0}, emit(copy, chain->second));
    ctx.current().fused += static_cast<int64_t>(chain->second.absorbed.size()) + 1;
  }
  ctx.current().changed = true;
  return copy.finish();
}

}  // namespace kiln::passes
