// Builds a new graph from selected nodes of an old one: the common tool of
// passes that drop, merge or replace nodes.
//
//   GraphCopy copy(g);
//   for (ir::NodeId id = 0; id < ir::NodeId(g.size()); ++id)
//     if (keep[id]) copy.copy_node(id);                 // inputs remapped, name kept
//   ir::Graph out = copy.finish();                      // outputs remapped
//
// Copied nodes keep their kind, name, op and attributes; op output types are
// inferred again in the new graph (so a copy also re-checks them). Node ids
// are assigned in copy order, so copying in the old order preserves the
// topological order. Reading a source entry that was neither copied nor
// mapped is an internal error.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

class GraphCopy {
 public:
  explicit GraphCopy(const ir::Graph& src);

  // Copies source node `id` (inputs remapped through map()) and returns its
  // outputs in the new graph. `type` replaces the type of an input/param/aux
  // node when given.
  std::vector<ir::Entry> copy_node(ir::NodeId id, const TensorType* type = nullptr);
  // From now on, source entry `from` reads as `to` (an entry of the new graph).
  void map_entry(ir::Entry from, ir::Entry to);
  // The new graph's entry for source entry `e`.
  ir::Entry map(ir::Entry e) const;
  bool is_mapped(ir::Entry e) const;

  ir::Graph& graph() { return dst_; }
  const ir::Graph& source() const { return src_; }
  // Sets the remapped source outputs and returns the new graph.
  ir::Graph finish();

 private:
  const ir::Graph& src_;
  ir::Graph dst_;
  std::vector<std::vector<ir::Entry>> map_;  // per source node, per output; node -1: unmapped
};

}  // namespace kiln::passes
