// eliminate-common-expr: merges op nodes that compute the same value.
//
//   ir::Graph out = passes::eliminate_common_expr(g, ctx);
//
// Two op nodes are the same when they have the same op, equal attributes
// (OpAttrs::operator==) and the same input entries (after earlier merges, so
// whole equal subexpressions merge); for commutative binary ops (elemwise and
// broadcast add and mul, maximum, minimum, equal, not_equal) in either
// order. The later node is dropped and its uses
// (and any graph outputs naming it) read the earlier node instead. Nodes of
// ops that are not passes::is_pure (random ops, ops with effects) are never
// merged, nor are input, param, aux or const nodes.
// Preserves: the order, names and types of the nodes kept, and the number and
// order of the graph outputs. Records merged nodes in PassStats::merged.
#pragma once

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

ir::Graph eliminate_common_expr(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
