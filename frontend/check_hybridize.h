// check_hybridize: does a block compute the same thing imperatively and
// compiled, and if not, where do the two first part?
//
//   auto mismatch = check_hybridize(net, {x});           // predict mode
//   if (mismatch) std::cerr << *mismatch << "\n";
//   // "node 'fullyconnected1' (FullyConnected) output 0: max |compiled - reference| = 0.31 at [0,5]
//   //  (compiled 1.2, reference 0.89); the 3 nodes before it agree"
//
// It traces `block`'s forward on the inputs' types, then evaluates the traced
// (unoptimized) graph twice with every node output made a graph output: node
// by node through invoke (the reference executor, eval_graph) and as one
// compiled GraphExecutor operation. Values are compared node by node in
// topological order; the first node whose output differs by more than
// `tolerance` (absolute, scaled by 1 + |reference|) is reported with the
// worst element. Finally the graph's outputs are compared with the block's
// own imperative forward on the same inputs. Returns nullopt when everything
// agrees. Runs in the mode in effect (autograd::is_training); the block's
// Dropout must be off (predict mode) for the comparison to be meaningful.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "frontend/ndarray.h"
#include "ir/graph.h"

namespace kiln {

namespace nn {
class Block;
}

std::optional<std::string> check_hybridize(nn::Block& block, std::span<const NDArray> inputs,
                                           double tolerance = 1e-5);

// The comparison step on its own: `a` and `b` hold every output of every
// node of `g` in node order (node 0's outputs, then node 1's, ...; leaves
// included). Returns the description of the first op-node output that
// differs, or nullopt.
std::optional<std::string> first_mismatch(const ir::Graph& g, std::span<const NDArray> a, std::span<const NDArray> b,
                                          double tolerance);

}  // namespace kiln
