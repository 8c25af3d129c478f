#include "frontend/graph_eval.h"

#include "frontend/invoke.h"

namespace kiln {

std::vector<NDArray> eval_graph(const ir::Graph& g, std::span<const NDArray> values_by_node) {
  KILN_CHECK(values_by_node.size() == g.size(), ValueError, "eval_graph: {} values for a graph of {} nodes",
             values_by_node.size(), g.size());
  std::vector<std::vector<NDArray>> outs(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = g.node(static_cast<ir::NodeId>(i));
    if (!n.is_op()) {
      const NDArray& v = values_by_node[i];
      KILN_CHECK(!v.is_none(), ValueError, "eval_graph: no value for {} node '{}'", ir::node_kind_name(n.kind), n.name);
      KILN_CHECK(v.shape() == n.types[0].shape && v.dtype() == n.types[0].dtype, ShapeError,
                 "eval_graph: {} node '{}' is {}{}, the value given is {}{}", ir::node_kind_name(n.kind), n.name,
                 dtype_short_name(n.types[0].dtype), n.types[0].shape, dtype_short_name(v.dtype()), v.shape());
      outs[i] = {v};
      continue;
    }
    std::vector<NDArray> in;
    in.reserve(n.inputs.size());
    for (const ir::Entry& e : n.inputs) in.push_back(outs[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)]);
    try {
      outs[i] = invoke(n.op, in, n.attrs);
    } catch (Error& e) {
      e.add_context(fmt::format("node '{}'", n.name));
      throw;
    }
  }
  std::vector<NDArray> result;
  for (const ir::Entry& e : g.outputs())
    result.push_back(outs[static_cast<size_t>(e.node)][static_cast<size_t>(e.index)]);
  return result;
}

}  // namespace kiln
