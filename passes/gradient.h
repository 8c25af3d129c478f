// gradient: builds one graph that computes a forward graph's outputs and the
// gradients of those outputs with respect to chosen input/param/aux nodes.
//
//   ir::Graph train = passes::build_gradient_graph(fwd, {"dense0.weight", "dense0.bias"});
//   // inputs:  fwd's input/param/aux nodes, then one input per forward output,
//   //          named head_grad_name(fwd, i) ("loss_grad"): the head gradient
//   // outputs: fwd's outputs, then d(outputs . head grads)/d(weight), d/d(bias)
//
// The backward part is made of ordinary ops: each forward op's GradFn
// (OpDef::grad, ir/grad.h), the same definitions eager autograd runs, applied
// through a GradBuilder that appends nodes instead of computing. Forward op
// nodes are visited in reverse order; a node gets a backward only if it is
// differentiable (OpDef::differentiable), one of its inputs needs a gradient
// (depends on a requested node through differentiable ops), and a gradient
// reaches one of its outputs. Outputs that no gradient reaches get `_zeros`
// when a sibling output has one. The GradFn sees the forward inputs only if
// OpDef::grad_uses_inputs and the outputs only if OpDef::grad_uses_outputs
// (none for those OpDef::grad_keeps_output excludes), exactly as in eager
// autograd. Several contributions to one value are summed
// with one add_n. A requested node no gradient reaches gets `_zeros`.
//
// The forward nodes are kept as they are (same ids, names and order);
// backward nodes come after them, named "<forward node>_grad/<op>" (made
// unique with a number). Nothing is removed: run eliminate-dead-code after
// it to drop backward work that leads nowhere. Mode-dependent ops (Dropout,
// BatchNorm) read the train/predict mode when the graph runs, as in eager.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

// The name of the head-gradient input for forward output `i`: "<node>_grad"
// for output 0 of a node, "<node>_<k>_grad" for output k > 0, with "_<i>"
// appended when that name is taken (an output listed twice, or a clash).
std::string head_grad_name(const ir::Graph& forward, size_t i);

// Throws ValueError when a name in `wrt` is not an input, param or aux node
// of `forward` (naming it and what it is instead); NotSupported when a
// differentiable op on the path has no GradFn. `train_mode` is the mode the
// graph will run in, where the caller knows it (GradBuilder::is_train: only
// GradFns of backward ops read it).
ir::Graph build_gradient_graph(const ir::Graph& forward, std::span<const std::string> wrt,
                               std::optional<bool> train_mode = std::nullopt);

// The pipeline pass "gradient": build_gradient_graph with
// ctx.options.gradient.wrt (empty: every param node, in graph order), in
// ctx.options.train_mode.
// Records the nodes it added in PassStats::added.
ir::Graph gradient(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
