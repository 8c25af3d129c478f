#include "passes/split_gradient.h"

#include <map>

#include "ir/error.h"
#include "passes/graph_copy.h"

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
  auto is_forward_op = [&](ir::NodeId id) { return g.node(id).is_op() && !backward[static_cast<size_t>(id)]; };

  // Saved: forward-op values that backward ops read or that are gradients.
  std::vector<ir::Entry> saved;
  std::map<std::pair<ir::NodeId, int32_t>, size_t> saved_index;
  auto save = [&](ir::Entry e) {
    if (!is_forward_op(e.node) || saved_index.contains({e.node, e.index})) return;
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
    std::vector<bool> leaf_needed(n, false);
    for (size_t id = 0; id < n; ++id) {
      const ir::Node& node = g.nodes()[id];
      if (!node.is_op() || !backward[id]) continue;
      for (const ir::Entry& e : node.inputs)
        if (!g.node(e.node).is_op()) leaf_needed[static_cast<size_t>(e.node)] = true;
    }
    for (size_t i = num_forward_outputs; i < g.outputs().size(); ++i) {
      ir::Entry e = g.outputs()[i];
      if (!g.node(e.node).is_op()) leaf_needed[static_cast<size_t>(e.node)] = true;
    }
    for (size_t i = 0; i < saved.size(); ++i)
      copy.map_entry(saved[i], copy.graph().add_input(out.saved[i], g.type(saved[i])));
    for (size_t id = 0; id < n; ++id) {
      auto nid = static_cast<ir::NodeId>(id);
      const ir::Node& node = g.node(nid);
      if ((!node.is_op() && (leaf_needed[id] || head[id])) || (node.is_op() && backward[id])) copy.copy_node(nid);
    }
    std::vector<ir::Entry> outputs;
    for (size_t i = num_forward_outputs; i < g.outputs().size(); ++i) outputs.push_back(copy.map(g.outputs()[i]));
    copy.graph().set_outputs(std::move(outputs));
    out.backward = std::move(copy.graph());
  }
  return out;
}

}  // namespace kiln::passes
