// eliminate-dead-code: drops the op nodes whose values cannot reach a graph
// output.
//
//   ir::Graph out = passes::eliminate_dead_code(g, ctx);
//
// Keeps: every op node some graph output depends on; every op node with
// effects (passes::has_effects: it writes an input in place, like BatchNorm
// updating its running statistics in training) and what it depends on; every
// input, param, aux and const node (the graph's interface), unless
// ctx.options.dead_code.remove_unused_inputs is set, in which case those that
// no kept node reads and no output names are dropped too.
// Preserves: the order of the kept nodes (so the topological order), their
// names, ops, attributes and types, and the outputs. Node ids are renumbered
// densely. Records the number of dropped nodes in PassStats::removed.
#pragma once

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

ir::Graph eliminate_dead_code(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
