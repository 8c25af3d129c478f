// Gradients as small graphs of ordinary ops, shared by eager autograd and the
// compiled backward (the gradient pass).
//
// Each differentiable op declares a GradFn beside its forward in
// ir/ops/<family>.cc. The GradFn does not compute anything itself: it asks a
// GradBuilder to apply ordinary ops to opaque values. Eager autograd's builder
// runs each op at once through invoke (values are NDArrays); the gradient
// pass's builder appends nodes to the backward graph (values are graph
// entries). One definition, two executions, so they cannot disagree.
//
//   // d/dx exp(x) = exp(x) * dy
//   void exp_grad(GradBuilder& b, const GradArgs& a, std::span<GradValue> in_grads) {
//     in_grads[0] = b.op(OpId::kElemwiseMul, {a.outputs[0], a.out_grads[0]});
//   }
//
// A GradValue may be "none" (index < 0): an input that needs no gradient gets
// none, and an output whose gradient is none contributes zero (builders skip
// ops whose GradFn would only see none). Where some of an op's outputs have
// gradients, the builders hand zeros for the others, or none where the op
// sets OpDef::grad_takes_none_out_grads.
#pragma once

#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "ir/attrs.h"
#include "ir/op.h"

namespace kiln {

// A handle to a value inside one GradBuilder.
struct GradValue {
  int index = -1;
  bool is_none() const { return index < 0; }
};

// What a GradFn sees of the forward call.
struct GradArgs {
  const OpAttrs& attrs;
  std::span<const GradValue> inputs;   // forward inputs (only if OpDef::grad_uses_inputs)
  std::span<const GradValue> outputs;  // forward outputs (only if OpDef::grad_uses_outputs; none where
                                       // OpDef::grad_keeps_output(i) is false)
  std::span<const GradValue> out_grads;  // one per forward output; may be none
  std::span<const bool> needs_grad;    // per forward input: false means the GradFn may leave it none
  std::span<const TensorType> input_types;  // always valid, even when inputs are not kept
};

class GradBuilder {
 public:
  virtual ~GradBuilder() = default;
  // Applies `op` to `inputs` and returns its outputs.
  virtual std::vector<GradValue> apply(OpId op, std::span<const GradValue> inputs, const OpAttrs& attrs) = 0;
  // Static type of a value (shapes are known in both eager and traced mode).
  virtual TensorType type(GradValue v) const = 0;
  // The train/predict mode the gradient ops will run in, where the builder
  // knows it (eager autograd does; a graph reads it only when it runs).
  // GradFns whose math depends on the mode and that are not kernels reading
  // it at run time (the composite gradient of _backward_BatchNorm) need it.
  virtual std::optional<bool> is_train() const { return std::nullopt; }

  GradValue op(OpId op, std::initializer_list<GradValue> inputs, const OpAttrs& attrs = {}) {
    auto out = apply(op, std::span<const GradValue>(inputs.begin(), inputs.size()), attrs);
    KILN_ASSERT(out.size() == 1);
    return out[0];
  }
};

// Fills `in_grads` (one slot per forward input, initially none).
using GradFn = void (*)(GradBuilder& b, const GradArgs& args, std::span<GradValue> in_grads);

// Reduces `grad` (shaped like a broadcast result) back to `target` shape by
// summing over broadcast axes: the gradient of NumPy broadcasting.
GradValue unbroadcast(GradBuilder& b, GradValue grad, const Shape& target);

}  // namespace kiln
