// fold-constants: evaluates, at compile time, op nodes whose inputs are all
// uniform constants (passes/uniform_constant.h: `_zeros`, `_ones`, `_full`)
// and replaces each by one `_full` node of its output type and value.
//
//   ir::Graph out = passes::fold_constants(g, ctx);
//   // exp(_ones(...)) * 2  ->  _full(value=5.43656...)
//
// Folds single-output, pure ops with a float32 or float64 output: unary and
// scalar elementwise ops, clip, Cast, Activation (relu, sigmoid, tanh,
// softrelu, softsign), binary elementwise and broadcast arithmetic and
// comparisons, add_n, layout ops (Reshape, transpose, Flatten, expand_dims,
// broadcast_to, slice, slice_axis, Concat, stack, _copy) and the reductions
// sum, mean, max, min, prod and norm. Values are computed in double and
// rounded once to the output dtype (a float32 kernel may differ in the last
// bit). Chains fold in one run, since the graph is visited in order.
// Not folded: arrays that are not uniform (_arange, random ops), and const
// nodes. A const node is an array the traced forward captured; the compiled
// graph reads it live at every call, as the imperative forward would, so a
// user who updates it in place sees the update. Folding ops over it would
// bake in its value at trace time (a silent difference between imperative
// and hybridized), so it is left alone on purpose.
// CachedOp's default pipeline runs this pass (frontend/cached_op.cc).
// The folded node keeps its name; what only it read is left, unused, for
// eliminate-dead-code. PassStats::rewritten counts the folded nodes.
#pragma once

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

ir::Graph fold_constants(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
