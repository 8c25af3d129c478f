// Internal to autograd and invoke: the tape's node and the recording hook.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <span>
#include <vector>

#include "frontend/ndarray.h"
#include "ir/op.h"

namespace kiln::autograd::detail {

struct Edge {
  std::shared_ptr<Node> node;  // null: the input is a constant for autograd
  int index = 0;               // which output of `node`
};

// What backward tells a custom node (Node::custom_backward) besides its
// output gradients.
struct CustomBackwardArgs {
  // Per input edge, none or the leaf's gradient buffer: the node may write
  // that input's gradient straight into it and return the buffer (the leaf
  // has grad_req write and this edge is the only gradient reaching it, so
  // backward would copy the gradient there anyway).
  std::span<const NDArray> into;
  // The node's backward may run again (retain_graph): what it saved must
  // stay intact.
  bool retain_graph = false;
};

// One recorded op, or a leaf (def == nullptr) holding a gradient buffer.
struct Node : std::enable_shared_from_this<Node> {
  const OpDef* def = nullptr;
  OpAttrs attrs;
  bool is_train = false;
  std::vector<Edge> inputs;
  // Inputs keep their tape entries (they point upstream: no cycle), so a
  // backward with create_graph records through them. Outputs are detached
  // (an entry would point back at this node) and re-attached on demand.
  std::vector<NDArray> saved_inputs;   // empty unless def->grad_uses_inputs
  std::vector<NDArray> saved_outputs;  // detached; empty unless def->grad_uses_outputs, none where
                                       // !def->grad_keeps_output(i)
  std::vector<TensorType> input_types;
  std::vector<TensorType> output_types;
  bool freed = false;  // saved arrays released by a backward without retain_graph

  // A node with its own backward instead of an OpDef (a hybridized block's
  // CachedOp): given one gradient per output (zeros where none arrived),
  // returns one gradient per input edge (none where not needed).
  bool custom = false;
  std::function<std::vector<NDArray>(std::span<const NDArray> out_grads, const CustomBackwardArgs& args)>
      custom_backward;
  // For backward with create_graph through a custom node: recomputes the
  // node's forward imperatively while recording and returns one gradient
  // per input edge (none where not needed) as recorded arrays, so they can be
  // differentiated again. Null when the node cannot.
  std::function<std::vector<NDArray>(std::span<const NDArray> out_grads)> custom_replay;

  // Leaves only.
  NDArray grad;
  GradReq req = GradReq::kNull;
  // Set when backward writes `grad`; the Trainer clears it at each step and
  // reports parameters whose gradient was never written (frontend/train/trainer.h).
  bool fresh_grad = false;

  bool is_leaf() const { return def == nullptr && !custom; }
  std::string_view name() const { return def ? def->name : custom ? std::string_view("CachedOp") : "leaf"; }
  bool needs_grad() const { return !is_leaf() || req != GradReq::kNull; }
};

// Called by invoke after pushing `def` when recording: appends a node if the
// op is differentiable and some input needs a gradient, and sets the outputs'
// tape entries.
void record(const OpDef& def, const OpAttrs& attrs, std::span<const NDArray> inputs, std::span<NDArray> outputs);

// The gradients of `heads` with respect to `variables`, recorded (as
// grad(..., create_graph = true)), each variable taken as independent of the
// others: the walk does not go past a variable's tape node, so what lies
// upstream of the variables is neither visited nor differentiated. For a
// custom node's replay, whose variables are its own input edges.
std::vector<NDArray> partial_grads(std::span<const NDArray> heads, std::span<const NDArray> head_grads,
                                   std::span<const NDArray> variables);

}  // namespace kiln::autograd::detail
