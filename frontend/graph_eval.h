// Evaluating an ir::Graph imperatively: every op node through `invoke`.
//
//   std::vector<NDArray> values(g.size());          // one slot per node
//   values[*g.find("data")] = x;                    // bind inputs, params, aux states
//   values[*g.find("dense0_weight")] = w;
//   std::vector<NDArray> outs = eval_graph(g, values);
//
// Each op runs as an ordinary imperative call, so while autograd records,
// the tape sees every node and backward works through the graph. Ops that
// mutate inputs (BatchNorm's running statistics in training) write into the
// arrays bound to those inputs. Dropout draws a fresh mask, and random ops
// fresh values, per evaluation from the device's streams (nd::dropout,
// nd::random), whatever seed a traced graph carries. Ops without inputs run
// on the device of the bound values. Results are queued, like any invoke.
//
// This is the reference executor: the compiled path (CachedOp) must agree
// with it, and SymbolBlock uses it for imported graphs.
#pragma once

#include <span>
#include <vector>

#include "frontend/ndarray.h"
#include "frontend/trace.h"
#include "ir/graph.h"

namespace kiln {

// `values_by_node` has g.size() entries; those of input, param, aux and const
// nodes must be set (ValueError naming the node otherwise; their types must
// equal the node's: ShapeError/TypeError naming it). Op entries are ignored.
// Returns the graph's outputs.
std::vector<NDArray> eval_graph(const ir::Graph& g, std::span<const NDArray> values_by_node);

// The values_by_node of a traced graph: `inputs` on its input nodes, the
// parameters' current arrays on its device, the captured constants.
std::vector<NDArray> bind_values(const trace::TracedGraph& t, std::span<const NDArray> inputs);

// Ops whose executors draw new random values per call (Dropout's mask,
// _random_uniform, _random_normal), and their attributes for one call: the
// stream position of a new draw on `device` (`in0`: the first input's shape,
// Dropout's data).
bool draws_per_call(OpId op);
OpAttrs attrs_for_call(OpId op, const OpAttrs& attrs, const Shape& in0, Device device, bool is_train);
// What a traced graph records for such an op: its attributes with the stream
// position (seed, offset) cleared, since executors set a new one per call.
OpAttrs attrs_for_trace(OpId op, const OpAttrs& attrs);

}  // namespace kiln
