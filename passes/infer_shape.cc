#include "passes/infer_shape.h"

#include "passes/graph_copy.h"

namespace kiln::passes {

ir::Graph retype(const ir::Graph& g, const std::unordered_map<std::string, TensorType>& input_types) {
  for (const auto& [name, type] : input_types) {
    auto id = g.find(name);
    KILN_CHECK(id.has_value(), ValueError, "infer-shape: a type is given for '{}', but the graph has no such node",
               name);
    const ir::Node& n = g.node(*id);
    KILN_CHECK(!n.is_op() && n.kind != ir::NodeKind::kConst, ValueError,
               "infer-shape: a type is given for '{}', which is {} node; expected an input, param or aux node", name,
               n.is_op() ? "an op" : "a const");
  }
  GraphCopy copy(g);
  for (size_t i = 0; i < g.size(); ++i) {
    auto id = static_cast<ir::NodeId>(i);
    const ir::Node& n = g.node(id);
    auto it = n.is_op() ? input_types.end() : input_types.find(n.name);
    copy.copy_node(id, it == input_types.end() ? nullptr : &it->second);
  }
  return copy.finish();
}

ir::Graph infer_shape(const ir::Graph& g, PassContext& ctx) {
  ir::Graph out = retype(g, ctx.options.infer_shape.input_types);
  int64_t changed = 0;
  for (size_t i = 0; i < g.size(); ++i)
    changed += g.node(static_cast<ir::NodeId>(i)).types != out.node(static_cast<ir::NodeId>(i)).types ? 1 : 0;
  PassStats& stats = ctx.current();
  stats.rewritten += changed;
  stats.changed = stats.changed || changed > 0;
  return changed ? out : g;
}

}  // namespace kiln::passes
