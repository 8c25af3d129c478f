// fold-batch-norm: in predict mode, a BatchNorm that normalizes the output of
// a Convolution or FullyConnected (and nothing else reads that output) is
// folded into the layer's weight and bias:
//
//   s  = gamma / sqrt(moving_var + eps)        (gamma = 1 with fix_gamma)
//   W' = W * s   (per output channel)          b' = (b or 0) * s + beta - moving_mean * s
//   BatchNorm(Conv(x, W, b)) == Conv(x, W', b')
//
// s, W' and b' are computed by ordinary ops on the parameter nodes, so the
// folded graph stays correct when the parameters change (a hybridized model
// that keeps training); those ops touch parameters only (O(weights) per call)
// instead of every activation. Runs only when ctx.options.train_mode is false
// or the BatchNorm uses global statistics; BatchNorm on an axis other than 1,
// whose mean/var outputs are read, or over a non-float32 value is left alone.
#pragma once

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

ir::Graph fold_batch_norm(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
