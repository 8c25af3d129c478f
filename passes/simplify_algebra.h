// simplify-algebra: replaces op nodes by simpler equivalents, one local rule
// at a time, over the graph in order (so chains collapse in one run).
//
//   ir::Graph out = passes::simplify_algebra(g, ctx);
//
// Rules (x, y arbitrary values; every rule applies only when the result has
// exactly the node's type, so nothing changes shape or dtype):
//   x * 1, x / 1, x + 0, x - 0, x ** 1 (scalar ops)      -> x
//   negative(negative(x))                                -> x
//   Reshape(x) to x's own shape                          -> x
//   Reshape(Reshape(x))                                  -> Reshape(x) to the final shape
//   transpose(transpose(x))                              -> transpose(x) by the composed axes (x if identity)
//   transpose(x) by the identity permutation             -> x
//   x + zeros, zeros + x (elemwise or broadcast)          -> x
//   x * ones, ones * x (elemwise or broadcast)           -> x
//   add_n(..., zeros, ...)                               -> add_n of the rest (x if one is left)
// where zeros/ones are `_zeros`/`_ones`/`_full` nodes of that value.
// A replaced node is dropped and its uses and graph outputs read the
// replacement; what only it read (the inner Reshape of two) is left, unused,
// for eliminate-dead-code.
// Preserves the names and order of the nodes it keeps; a rewritten node keeps
// its name. PassStats::rewritten counts the nodes replaced.
#pragma once

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

ir::Graph simplify_algebra(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
