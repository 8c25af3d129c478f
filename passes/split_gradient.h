// split-gradient: cuts a gradient graph (passes/gradient.h) into the part a
// training step runs at the forward call and the part it runs at backward.
//
//   ir::Graph g = passes::build_gradient_graph(fwd, wrt);
//   passes::SplitGraph s = passes::split_gradient_graph(g, fwd.outputs().size(), head_grad_names);
//   // s.forward:  the forward outputs, then the values backward needs ("saved")
//   // s.backward: inputs named in s.saved, the head gradients and the leaves it
//   //             reads; outputs: the gradients
//
// An op node runs in the forward part, once, when the forward outputs need
// it or it has effects or draws random numbers (so BatchNorm updates its
// running statistics once and a Dropout mask is drawn once) and it does not
// depend, directly or through other ops, on a head-gradient input. Every
// other op node runs in the backward part — also ops that read only forward
// values (a ReLU's mask): the forward then saves their inputs, which it
// usually keeps anyway, instead of their results.
// Values of the forward part that backward reads, or that are gradients
// themselves (a `_zeros` for a node no gradient reaches), are the saved
// values: extra outputs of the forward graph and input nodes of the backward
// graph, named "saved/<node>" ("saved/<node>/<k>" for output k > 0).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

struct SplitGraph {
  ir::Graph forward;
  ir::Graph backward;
  std::vector<std::string> saved;  // backward input names, in forward output order (after the forward outputs)
};

// `g`'s first `num_forward_outputs` outputs are the forward outputs; the rest
// are gradients. `head_grads` names g's head-gradient input nodes. Throws
// ValueError for a name that is not an input node of `g`.
SplitGraph split_gradient_graph(const ir::Graph& g, size_t num_forward_outputs,
                                std::span<const std::string> head_grads);

}  // namespace kiln::passes
