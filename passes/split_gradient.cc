#include "passes/split_gradient.h"

#include <functional>
#include <map>

#include "ir/error.h"
#include "ir/ops/conv.h"
#include "passes/graph_copy.h"
#include "passes/op_effects.h"

namespace kiln::passes {

SplitGraph split_gradient_graph(const ir::Graph& g, size_t num_forward_outputs,
                                std::span<const std::string> head_grads) {
  KILN_CHECK(num_forward_outputs <= g.outputs().size(), ValueError,
             "split-gradient: {} forward outputs asked for, the graph has {} outputs", num_forward_outputs,
             g.outputs().size());
  const size_t n = g.size();
  std::vector<bool> backward(n, false), head(n, false);
  for (const std::string& name : head_grads) {
    auto id = g.find(name);
    KILN_CHECK(id && g.node(*id).kind == ir::NodeKind::kInput, ValueError,
               "split-gradient: '{}' is not an input node of the gradient graph", name);
    head[static_cast<size_t>(*id)] = backward[static_cast<size_t>(*id)] = true;
  }
  for (size_t id = 0; id < n; ++id) {
    const ir::Node& node = g.nodes()[id];
    if (!node.is_op()) continue;
    for (const ir::Entry& e : node.inputs) backward[id] = backward[id] || backward[static_cast<size_t>(e.node)];
  }
  // Ops that neither the forward outputs need nor have effects run at
  // backward too, even when they read only forward values (a ReLU's mask, a
  // BatchNorm gradient's normalized input): saving their inputs, which the
  // forward keeps anyway, costs less memory than saving their results.
  std::vector<bool> needed(n, false);
  for (size_t i = 0; i < num_forward_outputs; ++i) needed[static_cast<size_t>(g.outputs()[i].node)] = true;
  for (size_t id = n; id-- > 0;) {
    const ir::Node& node = g.nodes()[id];
    if (!node.is_op() || backward[id]) continue;
    needed[id] = needed[id] || !is_pure(op_def(node.op));
    if (needed[id])
      for (const ir::Entry& e : node.inputs) needed[static_cast<size_t>(e.node)] = true;
  }
  for (size_t id = 0; id < n; ++id)
    if (g.nodes()[id].is_op() && !needed[id]) backward[id] = true;
  auto is_forward_op = [&](ir::NodeId id) { return g.node(id).is_op() && !backward[static_cast<size_t>(id)]; };

  // Recomputed at backward instead of saved: an activation of a BatchNorm's
  // output (ResNet's relu(bn(conv(x)))), or of a BatchNorm's output plus a
  // value backward has anyway (a residual block's relu(bn(conv(y)) + x),
  // where x is saved for a convolution's gradient, or recomputed itself).
  // BatchNorm's gradient saves its data and batch statistics anyway, so
  // recomputing costs an elementwise pass or two and saves one
  // activation-sized array per such layer.
  std::vector<bool> recompute(n, false);
  // Per recomputed activation: its BatchNorm, and for the residual form the
  // add and the add's other operand.
  struct Recompute {
    ir::NodeId bn = -1, add = -1;
    ir::Entry other{};
  };
  std::vector<Recompute> how(n);
  std::vector<bool> read_by_backward(n, false);  // output 0 read by a backward op
  for (size_t id = 0; id < n; ++id) {
    const ir::Node& node = g.nodes()[id];
    if (node.is_op() && backward[id])
      for (const ir::Entry& e : node.inputs)
        if (e.index == 0) read_by_backward[static_cast<size_t>(e.node)] = true;
  }
  auto bn_output = [&](ir::Entry e) {
    return is_forward_op(e.node) && g.node(e.node).op == OpId::kBatchNorm && e.index == 0 &&
           !read_by_backward[static_cast<size_t>(e.node)];
  };
  // A value backward has without saving more: a leaf, a forward value a
  // backward op reads (saved anyway), or a recomputed activation.
  auto available = [&](ir::Entry e) {
    return !g.node(e.node).is_op() || recompute[static_cast<size_t>(e.node)] ||
           (is_forward_op(e.node) && e.index == 0 && read_by_backward[static_cast<size_t>(e.node)]);
  };
  for (size_t id = 0; id < n; ++id) {
    const ir::Node& node = g.nodes()[id];
    if (!is_forward_op(static_cast<ir::NodeId>(id)) || (node.op != OpId::kRelu && node.op != OpId::kActivation))
      continue;
    const ir::Entry in = node.inputs[0];
    if (bn_output(in)) {
      recompute[id] = true;
      how[id].bn = in.node;
      continue;
    }
    const ir::Node& add = g.node(in.node);
    if (!is_forward_op(in.node) || add.op != OpId::kElemwiseAdd || read_by_backward[static_cast<size_t>(in.node)])
      continue;
    for (int k = 0; k < 2; ++k) {
      const ir::Entry a = add.inputs[static_cast<size_t>(k)], b = add.inputs[static_cast<size_t>(1 - k)];
      if (!bn_output(a) || !available(b) || b.node == a.node) continue;
      recompute[id] = true;
      how[id] = {a.node, in.node, b};
      break;
    }
  }

  // Saved: forward-op values that backward ops read or that are gradients
  // (for a recomputed value: what recomputing it reads).
  std::vector<ir::Entry> saved;
  std::map<std::pair<ir::NodeId, int32_t>, size_t> saved_index;
  std::vector<bool> leaf_needed(n, false);
  std::function<void(ir::Entry)> save = [&](ir::Entry e) {
    if (!g.node(e.node).is_op()) {
      leaf_needed[static_cast<size_t>(e.node)] = true;
      return;
    }
    if (!is_forward_op(e.node) || saved_index.contains({e.node, e.index})) return;
    if (recompute[static_cast<size_t>(e.node)]) {
      const Recompute& r = how[static_cast<size_t>(e.node)];
      const std::vector<ir::Entry>& bn_in = g.node(r.bn).inputs;
      for (ir::Entry x : {bn_in[0], bn_in[1], bn_in[2], ir::Entry{r.bn, 1}, ir::Entry{r.bn, 2}}) save(x);
      if (r.add >= 0) save(r.other);
      return;
    }
    saved_index[{e.node, e.index}] = saved.size();
    saved.push_back(e);
  };
  for (size_t id = 0; id < n; ++id) {
    const ir::Node& node = g.nodes()[id];
    if (node.is_op() && backward[id])
      for (const ir::Entry& e : node.inputs) save(e);
  }
  for (size_t i = num_forward_outputs; i < g.outputs().size(); ++i) save(g.outputs()[i]);

  SplitGraph out;
  auto saved_name = [&](ir::Entry e) {
    const std::string& base = g.node(e.node).name;
    return e.index == 0 ? "saved/" + base : fmt::format("saved/{}/{}", base, e.index);
  };

  {  // forward: every leaf but the head gradients, then the forward ops
    GraphCopy copy(g);
    for (size_t id = 0; id < n; ++id) {
      auto nid = static_cast<ir::NodeId>(id);
      if ((!g.node(nid).is_op() && !head[id]) || is_forward_op(nid)) copy.copy_node(nid);
    }
    std::vector<ir::Entry> outputs;
    for (size_t i = 0; i < num_forward_outputs; ++i) outputs.push_back(copy.map(g.outputs()[i]));
    for (ir::Entry e : saved) {
      outputs.push_back(copy.map(e));
      out.saved.push_back(saved_name(e));
    }
    copy.graph().set_outputs(std::move(outputs));
    out.forward = std::move(copy.graph());
  }
  {  // backward: saved values and the leaves backward reads, then the backward ops
    GraphCopy copy(g);
    for (size_t i = 0; i < saved.size(); ++i)
      copy.map_entry(saved[i], copy.graph().add_input(out.saved[i], g.type(saved[i])));
    // A recomputed activation, just before its first reader (so it lives
    // briefly): BatchNorm with the saved batch statistics as its statistics
    // (use_global_stats: the same arithmetic, no running-statistics update),
    // then the activation.
    // (The residual form: the add's other operand first, itself recomputed
    // if need be, then BatchNorm, the add and the activation.)
    std::function<void(ir::NodeId)> materialize = [&](ir::NodeId act) {
      const Recompute& r = how[static_cast<size_t>(act)];
      if (r.add >= 0 && recompute[static_cast<size_t>(r.other.node)] && !copy.is_mapped(r.other))
        materialize(r.other.node);
      const ir::NodeId bn = r.bn;
      const ir::Node& bn_node = g.node(bn);
      BatchNormAttrs attrs = bn_node.attrs.as<BatchNormAttrs>();
      attrs.use_global_stats = true;
      const ir::Entry in[] = {copy.map(bn_node.inputs[0]), copy.map(bn_node.inputs[1]), copy.map(bn_node.inputs[2]),
                              copy.map({bn, 1}), copy.map({bn, 2})};
      copy.map_entry({bn, 0}, copy.graph().add_op(OpId::kBatchNorm, OpAttrs::make(attrs), in,
                                                  "recompute/" + bn_node.name)[0]);
      if (r.add >= 0) copy.copy_node(r.add);
      copy.copy_node(act);
    };
    for (size_t id = 0; id < n; ++id) {
      auto nid = static_cast<ir::NodeId>(id);
      const ir::Node& node = g.node(nid);
      if (!node.is_op() && (leaf_needed[id] || head[id])) copy.copy_node(nid);
      if (!node.is_op() || !backward[id]) continue;
      for (const ir::Entry& e : node.inputs)
        if (recompute[static_cast<size_t>(e.node)] && !copy.is_mapped(e)) materialize(e.node);
      copy.copy_node(nid);
    }
    std::vector<ir::Entry> outputs;
    for (size_t i = num_forward_outputs; i < g.outputs().size(); ++i) {
      const ir::Entry e = g.outputs()[i];
      if (recompute[static_cast<size_t>(e.node)] && !copy.is_mapped(e)) materialize(e.node);
      outputs.push_back(copy.map(e));
    }
    copy.graph().set_outputs(std::move(outputs));
    out.backward = std::move(copy.graph());
  }
  return out;
}

}  // namespace kiln::passes
