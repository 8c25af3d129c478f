#include "passes/decompose.h"

#include <algorithm>

#include "ir/decompose.h"
#include "passes/graph_copy.h"
#include "passes/graph_grad_builder.h"

namespace kiln::passes {

ir::Graph decompose(const ir::Graph& g, PassContext& ctx) {
  const std::vector<OpId>& ops = ctx.options.decompose;
  auto selected = [&](const ir::Node& n) {
    return n.is_op() && decomposition(n.op) != nullptr && std::find(ops.begin(), ops.end(), n.op) != ops.end();
  };
  if (std::none_of(g.nodes().begin(), g.nodes().end(), selected)) return g;
  GraphCopy copy(g);
  GraphGradBuilder b(copy.graph(), ctx.options.train_mode);
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(g.size()); ++id) {
    const ir::Node& n = g.node(id);
    if (!selected(n)) {
      copy.copy_node(id);
      continue;
    }
    b.set_scope(n.name);
    std::vector<GradValue> in;
    for (const ir::Entry& e : n.inputs) in.push_back(b.add(copy.map(e)));
    std::vector<GradValue> out = decomposition(n.op)(b, in, n.attrs);
    KILN_ASSERT(static_cast<int>(out.size()) == n.num_outputs());
    for (int32_t i = 0; i < n.num_outputs(); ++i) copy.map_entry({id, i}, b.entry(out[static_cast<size_t>(i)]));
    ++ctx.current().rewritten;
  }
  ctx.current().changed = true;
  return copy.finish();
}

}  // namespace kiln::passes
