// amp-cast: applies the mixed-precision policy (ir/amp.h) to a graph, the
// compiled counterpart of autocast at invoke (frontend/amp.h).
//
//   passes::PassContext ctx;
//   ctx.options.amp = DType::kBfloat16;      // unset: the pass changes nothing
//   ir::Graph out = passes::amp_cast(g, ctx);
//
// Each op node whose policy asks for other input dtypes than it has gets a
// `Cast` node in front of those inputs (named "<node>_amp_cast<i>"); its
// outputs then take the dtypes inference gives them, so low precision flows
// on through ops that follow their inputs. One cast per (value, dtype): a
// parameter read by several layers, or an activation read by several ops, is
// cast once. A cast that would undo a lossless cast in front of it (float32
// back to bfloat16 after bfloat16 -> float32) reads the original value
// instead. Graph outputs keep the dtype the policy gives them, as autocast's
// results do. PassStats::added counts the casts inserted.
#pragma once

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

ir::Graph amp_cast(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
