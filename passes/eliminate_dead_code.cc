#include "passes/eliminate_dead_code.h"

#include "passes/graph_copy.h"
#include "passes/op_effects.h"

namespace kiln::passes {

ir::Graph eliminate_dead_code(const ir::Graph& g, PassContext& ctx) {
  const size_t n = g.size();
  std::vector<bool> live(n, false);
  std::vector<ir::NodeId> work;
  auto mark = [&](ir::NodeId id) {
    if (!live[static_cast<size_t>(id)]) {
      live[static_cast<size_t>(id)] = true;
      work.push_back(id);
    }
  };
  for (const ir::Entry& e : g.outputs()) mark(e.node);
  for (size_t i = 0; i < n; ++i) {
    const ir::Node& node = g.node(static_cast<ir::NodeId>(i));
    if (node.is_op() ? has_effects(op_def(node.op)) : !ctx.options.dead_code.remove_unused_inputs)
      mark(static_cast<ir::NodeId>(i));
  }
  while (!work.empty()) {
    const ir::Node& node = g.node(work.back());
    work.pop_back();
    if (!node.is_op()) continue;  // a const node's input is a table slot, not a node
    for (const ir::Entry& e : node.inputs) mark(e.node);
  }

  int64_t removed = 0;
  for (size_t i = 0; i < n; ++i) removed += live[i] ? 0 : 1;
  PassStats& stats = ctx.current();
  stats.removed += removed;
  if (removed == 0) return g;
  stats.changed = true;
  GraphCopy copy(g);
  for (size_t i = 0; i < n; ++i)
    if (live[i]) copy.copy_node(static_cast<ir::NodeId>(i));
  return copy.finish();
}

}  // namespace kiln::passes
