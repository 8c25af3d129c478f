#include "frontend/graph_eval.h"

#include "frontend/autograd.h"
#include "frontend/invoke.h"
#include "frontend/nd_init.h"
#include "frontend/nd_nn.h"
#include "ir/error.h"
#include "ir/ops/init.h"
#include "ir/ops/nn.h"

namespace kiln {
namespace {

// `device`: where ops without inputs run (the graph's device).
std::vector<NDArray> run_node(const ir::Node& n, std::span<const NDArray> inputs, Device device) {
  if (!draws_per_call(n.op)) return invoke(n.op, inputs, n.attrs, {.device = device});
  Shape in0 = inputs.empty() ? Shape{} : inputs[0].shape();
  OpAttrs attrs = attrs_for_call(n.op, n.attrs, in0, device, autograd::is_training());
  return invoke(n.op, inputs, attrs, {.device = device});
}

}  // namespace

bool draws_per_call(OpId op) {
  return op == OpId::kDropout || op == OpId::kRandomUniform || op == OpId::kRandomNormal;
}

OpAttrs attrs_for_trace(OpId op, const OpAttrs& attrs) {
  KILN_ASSERT(draws_per_call(op));
  auto cleared = [](auto a) {
    a.seed = 0;
    a.offset = 0;
    return OpAttrs::make(a);
  };
  return op == OpId::kDropout ? cleared(attrs.as<DropoutAttrs>()) : cleared(attrs.as<RandomAttrs>());
}

OpAttrs attrs_for_call(OpId op, const OpAttrs& attrs, const Shape& in0, Device device, bool is_train) {
  KILN_ASSERT(draws_per_call(op));
  return op == OpId::kDropout ? nd::dropout_attrs_for_call(attrs, in0, device, is_train)
                              : nd::random::attrs_for_call(attrs, device);
}

std::vector<NDArray> bind_values(const trace::TracedGraph& t, std::span<const NDArray> inputs) {
  KILN_CHECK(inputs.size() == t.inputs.size(), ValueError, "traced graph: {} inputs given, it takes {}",
             inputs.size(), t.inputs.size());
  std::vector<NDArray> values(t.graph.size());
  for (size_t i = 0; i < t.inputs.size(); ++i) values[static_cast<size_t>(t.inputs[i])] = inputs[i];
  for (const auto& [node, p] : t.params) values[static_cast<size_t>(node)] = p.data(t.device);
  for (const auto& [node, a] : t.consts) values[static_cast<size_t>(node)] = a;
  return values;
}

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
