// decompose: each op node whose op is in ctx.options.decompose and has a
// decomposition (ir/decompose.h) is replaced by the ordinary ops of that
// decomposition, named "<node>/<op>"; readers of the node's outputs read the
// decomposition's results. Everything else is copied as it is. CachedOp runs
// it first, listing the ops its device has no kernel for (a CPU-only fused
// op on a GPU) and those KILN_DECOMPOSE names, so the graph that is
// differentiated, planned and executed holds only ops the device runs.
//
//   ctx.options.decompose = {OpId::kAttention};
//   ir::Graph g2 = passes::run_pass("decompose", g, ctx);   // no _kiln_attention left
//
// Before:  %o, %l = _kiln_attention(%q, %k, %v) {causal=True}
// After:   batch_dot, _mul_scalar, _arange, broadcast_lesser_equal, log, max,
//          exp, sum, broadcast_div, batch_dot (and Cast for 16-bit data)
#pragma once

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

ir::Graph decompose(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
