#include "frontend/graph_eval.h"

#include "frontend/invoke.h"
#include "frontend/nd_init.h"
#include "frontend/nd_nn.h"
#include "ir/error.h"
#include "ir/ops/nn.h"

namespace kiln {
namespace {

// `device`: where ops without inputs run (the graph's device).
std::vector<NDArray> run_node(const ir::Node& n, std::span<const NDArray> inputs, Device device) {
  if (n.op == OpId::kDropout) {  // a fresh mask per call, not the traced one
    const auto& a = n.attrs.as<DropoutAttrs>();
    return {nd::dropout(inputs[0], a.p, a.axes, a.mode)};
  }
  if (n.op == OpId::kRandomUniform || n.op == OpId::kRandomNormal)  // new values per call
    return invoke(n.op, inputs, nd::random::attrs_for_call(n.attrs, device), {.device = device});
  return invoke(n.op, inputs, n.attrs, {.device = device});
}

}  // namespace

std::vector<NDArray> eval_graph(const ir::Graph& g, std::span<const NDArray> values_by_node) {
  KILN_CHECK(values_by_node.size() == g.size(), ValueError, "eval_graph: {} values given for a graph of {} nodes",
             values_by_node.size(), g.size());
  // Per node, its outputs (leaves: the bound array).
  std::vector<std::vector<NDArray>> values(g.size());
  std::vector<NDArray> inputs;
  Device device = Device::cpu(0);
  for (size_t id = 0; id < g.size(); ++id) {
    if (!g.nodes()[id].is_op() && !values_by_node[id].is_none()) {
      device = values_by_node[id].device();
      break;
    }
  }
  for (size_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.nodes()[id];
    if (!n.is_op()) {
      const NDArray& v = values_by_node[id];
      KILN_CHECK(!v.is_none(), ValueError, "eval_graph: {} node '{}' has no value bound", ir::node_kind_name(n.kind),
                 n.name);
      KILN_CHECK(v.shape() == n.types[0].shape, ShapeError, "eval_graph: {} node '{}' expects shape {}, got {}",
                 ir::node_kind_name(n.kind), n.name, n.types[0].shape, v.shape());
      KILN_CHECK(v.dtype() == n.types[0].dtype, TypeError, "eval_graph: {} node '{}' expects {}, got {}",
                 ir::node_kind_name(n.kind), n.name, dtype_name(n.types[0].dtype), dtype_name(v.dtype()));
      values[id] = {v};
      continue;
    }
    inputs.clear();
    for (const ir::Entry& e : n.inputs) inputs.push_back(values[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)]);
    try {
      values[id] = run_node(n, inputs, device);
    } catch (Error& e) {
      e.add_context(fmt::format("node '{}'", n.name));
      throw;
    }
  }
  std::vector<NDArray> outs;
  for (const ir::Entry& e : g.outputs()) outs.push_back(values[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)]);
  return outs;
}

}  // namespace kiln
