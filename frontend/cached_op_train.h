// The compiled training step of a CachedOp entry: forward and backward graphs
// from the gradient pass, run as two engine operations, with the CachedOp as
// one node on the autograd tape.
//
//   auto program = TrainProgram::compile(traced, input_needs_grad, is_train);
//   std::vector<NDArray> y = program->call(inputs, is_train);   // records one tape node
//
// compile: the gradient graph of the traced forward with respect to the
// inputs that need a gradient and every parameter whose grad_req is not null
// (passes::build_gradient_graph, the same GradFns eager autograd runs), split
// into the part that runs at the call and the part that runs at backward
// (passes::split_gradient_graph), each planned and run by a GraphExecutor.
// call: runs the forward part, keeps its saved values on the tape node, and
// returns the forward outputs; autograd::backward later runs the backward
// part with the head gradients and routes the gradients to the inputs and
// to the parameters' gradient buffers (write/add as their grad_req says).
//
// Memory: the saved values of a call lie in one block (a uint8 array per
// call) that the backward part's memory plan treats as part of its arena:
// a saved value's storage is reused by backward's intermediates once its
// last reader ran, so backward needs little beyond the block (a backward
// that may run again, retain_graph, runs on a copy of the block). Gradients
// of parameters with grad_req write that nothing else reaches are written
// straight into their gradient buffers (autograd::detail::CustomBackwardArgs).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "frontend/graph_executor.h"
#include "frontend/trace.h"

namespace kiln {

class TrainProgram : public std::enable_shared_from_this<TrainProgram> {
 public:
  // Null when there is nothing to differentiate (no input needs a gradient
  // and no parameter has one) or when the graph cannot run compiled
  // (GraphExecutor::supports). `label` names the step in messages (the
  // executors' labels: "<label> forward", "<label> backward").
  static std::shared_ptr<const TrainProgram> compile(std::shared_ptr<const trace::TracedGraph> traced,
                                                     const std::vector<bool>& input_needs_grad, bool train_mode,
                                                     const std::string& label = {});

  std::vector<NDArray> call(std::span<const NDArray> inputs, bool is_train) const;

  // Where a step's memory goes (bytes): the arena the forward and backward
  // parts share (the larger of their plans), and the values the forward part
  // saves for backward (fresh arrays per call, held until backward ran).
  struct Memory {
    int64_t forward_arena = 0, backward_arena = 0;
    int64_t saved = 0;
    int64_t num_saved = 0;
    int64_t block = 0;  // the part of `saved` in the per-call block
    std::string to_string() const;  // one line, MiB
  };
  const Memory& memory() const { return memory_; }

 private:
  // Gradients with create_graph (autograd::detail::Node::custom_replay):
  // the traced forward evaluated again through invoke while recording, then
  // differentiated by eager autograd, so the gradients are themselves on the
  // tape. One per tape edge of a call (inputs, then param_grads_).
  std::vector<NDArray> replay_gradients(std::span<const NDArray> inputs, std::span<const NDArray> out_grads,
                                        bool is_train) const;

  // Where each backward input comes from.
  enum class Source : int8_t { kSaved, kHeadGrad, kInput };
  struct BackwardInput {
    Source source;
    size_t index;
  };

  Device device_;
  std::shared_ptr<const trace::TracedGraph> traced_;  // the forward as traced (the cache entry's), for replay_gradients
  size_t num_outputs_ = 0;
  std::vector<TensorType> output_types_;
  std::unique_ptr<GraphExecutor> forward_, backward_;
  size_t num_backward_outputs_ = 0;
  std::vector<BackwardInput> backward_inputs_;
  std::vector<int> input_grad_;  // per call input: index among the backward outputs, or -1
  std::vector<std::pair<nn::Parameter, int>> param_grads_;  // parameter, index among the backward outputs
  Memory memory_;
};

}  // namespace kiln
