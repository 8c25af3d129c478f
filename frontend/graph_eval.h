// Evaluates an ir::Graph eagerly, one op at a time through invoke.
//
//   std::vector<NDArray> values(g.size());            // one slot per node
//   values[*g.find("data")] = x;                       // inputs, params, aux states
//   std::vector<NDArray> ys = eval_graph(g, values);   // the graph's outputs
//
// values_by_node.size() must equal g.size(); entries of input, param, aux
// and const nodes must be set (ValueError naming the node otherwise) and
// match the node's type; entries of op nodes are ignored. Each op node runs
// through invoke, so autograd records it and the engine orders it; aux
// states an op mutates (BatchNorm's moving stats in train mode) are updated
// in the arrays passed in.
//
// (Stand-in on the symjson branch; the lead's version on main replaces it
// with the same signature.)
#pragma once

#include <span>
#include <vector>

#include "frontend/ndarray.h"
#include "ir/graph.h"

namespace kiln {

std::vector<NDArray> eval_graph(const ir::Graph& g, std::span<const NDArray> values_by_node);

}  // namespace kiln
