// fuse-conv-activation: a Convolution or FullyConnected whose output only
// feeds an activation becomes one fused node (ir/ops/fused_layers.h), whose CPU
// kernel applies the activation (and a residual sum) as oneDNN post-ops while
// the output is still in cache:
//
//   relu(Convolution(x, w, b))                     -> _kiln_conv_act(x, w, b)
//   relu(broadcast_add(Convolution(x, w), c))      -> _kiln_conv_act(x, w, reshape(c, (C,)))
//   relu(Convolution(x, w, b) + shortcut)          -> _kiln_conv_act(x, w, b, shortcut) with_sum
//   Activation(FullyConnected(x, w, b), sigmoid)   -> _kiln_fc_act(x, w, b)
//
// The activation is Activation (relu, sigmoid, tanh, softrelu) or the
// elementwise relu, sigmoid and tanh ops. A per-channel constant added by
// broadcast_add (shape [1, C, 1, ...] or [C, 1, ...] against the output) is
// folded into the bias (summed with it when the layer has one). The residual
// is the other operand of an elemwise_add or a broadcast_add of two arrays
// of the output's shape and dtype. Convolutions must be float32;
// FullyConnected may be float32 or float64.
//
// Runs only in predict mode (ctx.options.train_mode false): the fused ops
// are inference kernels. (They differentiate as the unfused chain does, for a
// predict-mode graph that is recorded.) Fuses only when every intermediate
// value (the layer's output, the bias and residual sums) is read by the next
// op of the chain alone and is not a graph output. Leaves everything else as
// it is; keeps the names of the graph's leaves (the fused node takes the
// layer's name). Reports the number of original nodes replaced in `fused`.
#pragma once

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

ir::Graph fuse_conv_activation(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
