#include "passes/fold_batch_norm.h"

#include <map>

#include "ir/ops/conv.h"
#include "ir/ops/conv_layout.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/nn.h"
#include "passes/graph_copy.h"

namespace kiln::passes {
namespace {

// Readers of every entry, and whether it is a graph output.
struct Uses {
  std::map<std::pair<ir::NodeId, int32_t>, int> readers;
  std::map<std::pair<ir::NodeId, int32_t>, bool> is_output;
  explicit Uses(const ir::Graph& g) {
    for (const ir::Node& n : g.nodes())
      for (const ir::Entry& e : n.inputs)
        if (e.node >= 0) ++readers[{e.node, e.index}];
    for (const ir::Entry& e : g.outputs()) is_output[{e.node, e.index}] = true;
  }
  int count(ir::NodeId n, int32_t i) const {
    auto it = readers.find({n, i});
    return it == readers.end() ? 0 : it->second;
  }
  bool output(ir::NodeId n, int32_t i) const { return is_output.contains({n, i}); }
};

// The layer a foldable BatchNorm `bn` normalizes, or -1.
ir::NodeId foldable_layer(const ir::Graph& g, const Uses& uses, ir::NodeId bn, bool train_mode) {
  const ir::Node& n = g.node(bn);
  if (!n.is_op() || n.op != OpId::kBatchNorm) return -1;
  const auto& a = n.attrs.as<BatchNormAttrs>();
  if ((train_mode && !a.use_global_stats) || a.axis != 1 || a.output_mean_var) return -1;
  for (int32_t i = 1; i < n.num_outputs(); ++i)
    if (uses.count(bn, i) > 0 || uses.output(bn, i)) return -1;
  ir::Entry x = n.inputs[0];
  const ir::Node& layer = g.node(x.node);
  if (!layer.is_op() || x.index != 0 || g.type(x).dtype != DType::kFloat32) return -1;
  if (layer.op != OpId::kConvolution && layer.op != OpId::kFullyConnected) return -1;
  if (layer.op == OpId::kFullyConnected && g.type(x).shape.ndim() != 2) return -1;
  if (layer.op == OpId::kConvolution && channels_last(layer.attrs.as<ConvolutionAttrs>().layout)) return -1;
  if (uses.count(x.node, 0) != 1 || uses.output(x.node, 0)) return -1;
  return x.node;
}

OpAttrs scalar(double v) { return OpAttrs::make(ScalarAttrs{.scalar = v}); }

}  // namespace

ir::Graph fold_batch_norm(const ir::Graph& g, PassContext& ctx) {
  const Uses uses(g);
  std::map<ir::NodeId, ir::NodeId> bn_of_layer;  // layer -> its BatchNorm
  for (size_t id = 0; id < g.size(); ++id) {
    ir::NodeId layer = foldable_layer(g, uses, static_cast<ir::NodeId>(id), ctx.options.train_mode);
    if (layer >= 0) bn_of_layer[layer] = static_cast<ir::NodeId>(id);
  }
  if (bn_of_layer.empty()) return g;

  GraphCopy copy(g);
  ir::Graph& dst = copy.graph();
  // Leaves first: a layer's folded weights read its BatchNorm's parameters,
  // whose nodes a trace adds after the layer.
  for (size_t id = 0; id < g.size(); ++id)
    if (!g.nodes()[id].is_op()) copy.copy_node(static_cast<ir::NodeId>(id));
  std::map<ir::NodeId, ir::Entry> folded;  // BatchNorm -> the folded layer's output
  for (size_t id = 0; id < g.size(); ++id) {
    auto nid = static_cast<ir::NodeId>(id);
    const ir::Node& n = g.node(nid);
    if (!n.is_op()) continue;
    if (auto it = folded.find(nid); it != folded.end()) {
      copy.map_entry({nid, 0}, it->second);
      continue;
    }
    auto pair = bn_of_layer.find(nid);
    if (pair == bn_of_layer.end()) {
      copy.copy_node(nid);
      continue;
    }
    const ir::Node& bn = g.node(pair->second);
    const auto& a = bn.attrs.as<BatchNormAttrs>();
    const std::string base = bn.name + "/fold";
    auto op = [&](OpId o, std::vector<ir::Entry> in, const OpAttrs& attrs, const char* suffix) {
      return dst.add_op(o, attrs, in, fmt::format("{}_{}", base, suffix))[0];
    };
    ir::Entry gamma = copy.map(bn.inputs[1]), beta = copy.map(bn.inputs[2]);
    ir::Entry mean = copy.map(bn.inputs[3]), var = copy.map(bn.inputs[4]);
    ir::Entry stddev = op(OpId::kSqrt, {op(OpId::kPlusScalar, {var}, scalar(a.eps), "var_eps")}, {}, "std");
    ir::Entry s = a.fix_gamma ? op(OpId::kRDivScalar, {stddev}, scalar(1.0), "scale")
                              : op(OpId::kElemwiseDiv, {gamma, stddev}, {}, "scale");
    ir::Entry shift = op(OpId::kElemwiseSub, {beta, op(OpId::kElemwiseMul, {mean, s}, {}, "mean_scaled")}, {}, "shift");

    const ir::Node& layer = n;
    ir::Entry w = copy.map(layer.inputs[1]);
    Shape s_shape(std::vector<int64_t>(static_cast<size_t>(dst.type(w).shape.ndim()), 1));
    s_shape[0] = dst.type(s).shape[0];
    const OpDef& reshape = op_def(OpId::kReshape);
    ir::Entry s_col = op(OpId::kReshape, {s}, reshape.parse_attrs(reshape.name, {{"shape", s_shape.to_mxnet_string()}}),
                         "scale_col");
    ir::Entry w2 = op(OpId::kBroadcastMul, {w, s_col}, {}, "weight");
    bool had_bias = layer.op == OpId::kConvolution ? !layer.attrs.as<ConvolutionAttrs>().no_bias
                                                   : !layer.attrs.as<FullyConnectedAttrs>().no_bias;
    ir::Entry b2 = had_bias ? op(OpId::kElemwiseAdd,
                                 {op(OpId::kElemwiseMul, {copy.map(layer.inputs[2]), s}, {}, "bias_scaled"), shift},
                                 {}, "bias")
                            : shift;
    OpAttrs attrs;
    if (layer.op == OpId::kConvolution) {
      ConvolutionAttrs c = layer.attrs.as<ConvolutionAttrs>();
      c.no_bias = false;
      attrs = OpAttrs::make(c);
    } else {
      FullyConnectedAttrs f = layer.attrs.as<FullyConnectedAttrs>();
      f.no_bias = false;
      attrs = OpAttrs::make(f);
    }
    std::vector<ir::Entry> out = dst.add_op(layer.op, attrs, std::vector<ir::Entry>{copy.map(layer.inputs[0]), w2, b2},
                                            layer.name);
    copy.map_entry({nid, 0}, out[0]);
    folded[pair->second] = out[0];
    ++ctx.current().rewritten;
    ++ctx.current().removed;
  }
  ctx.current().changed = true;
  return copy.finish();
}

}  // namespace kiln::passes
