#include "ir/grad_ops.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "ir/ops/elemwise.h"
#include "ir/ops/init.h"
#include "ir/ops/matrix.h"
#include "ir/ops/reduce.h"

namespace kiln {
namespace grad_ops {
namespace {

GradValue binary(GradBuilder& b, OpId same, OpId broadcast, GradValue x, GradValue y) {
  return b.op(b.type(x).shape == b.type(y).shape ? same : broadcast, {x, y});
}

}  // namespace

GradValue add(GradBuilder& b, GradValue x, GradValue y) {
  return binary(b, OpId::kElemwiseAdd, OpId::kBroadcastAdd, x, y);
}
GradValue sub(GradBuilder& b, GradValue x, GradValue y) {
  return binary(b, OpId::kElemwiseSub, OpId::kBroadcastSub, x, y);
}
GradValue mul(GradBuilder& b, GradValue x, GradValue y) {
  return binary(b, OpId::kElemwiseMul, OpId::kBroadcastMul, x, y);
}
GradValue div(GradBuilder& b, GradValue x, GradValue y) {
  return binary(b, OpId::kElemwiseDiv, OpId::kBroadcastDiv, x, y);
}
GradValue neg(GradBuilder& b, GradValue x) { return b.op(OpId::kNegative, {x}); }
GradValue unary(GradBuilder& b, OpId op, GradValue x) { return b.op(op, {x}); }

GradValue scalar(GradBuilder& b, OpId op, GradValue x, double s) {
  ScalarAttrs a;
  a.scalar = s;
  return b.op(op, {x}, OpAttrs::make(a));
}

GradValue sum(GradBuilder& b, GradValue x, const std::vector<int64_t>& axes, bool keepdims) {
  ReduceAttrs a;
  a.axis = IntTuple(axes.begin(), axes.end());
  a.keepdims = keepdims;
  return b.op(OpId::kSum, {x}, OpAttrs::make(a));
}

GradValue sum(GradBuilder& b, GradValue x, std::initializer_list<int> axes, bool keepdims) {
  return sum(b, x, std::vector<int64_t>(axes.begin(), axes.end()), keepdims);
}

GradValue reshape_to(GradBuilder& b, GradValue v, const Shape& s) {
  TensorType t = b.type(v);
  if (t.shape == s) return v;
  ReshapeAttrs a;
  a.shape = s.to_vector();
  if (s.size() == 0) {
    // 0 means "copy an input dim" in a Reshape spec: one zero dim is
    // inferred with -1, several give fresh zeros.
    auto zeros = std::count(a.shape.begin(), a.shape.end(), int64_t{0});
    if (zeros > 1) return b.op(OpId::kZeros, {}, OpAttrs::make(InitAttrs{s, t.dtype}));
    *std::find(a.shape.begin(), a.shape.end(), int64_t{0}) = -1;
  }
  return b.op(OpId::kReshape, {v}, OpAttrs::make(a));
}

}  // namespace grad_ops

namespace {

// Forwards every op to the real builder and remembers it.
class TapingBuilder final : public GradBuilder {
 public:
  struct Step {
    OpId op;
    OpAttrs attrs;
    std::vector<GradValue> inputs, outputs;
  };

  explicit TapingBuilder(GradBuilder& inner) : inner_(inner) {}

  std::vector<GradValue> apply(OpId op, std::span<const GradValue> inputs, const OpAttrs& attrs) override {
    std::vector<GradValue> out = inner_.apply(op, inputs, attrs);
    steps_.push_back({op, attrs, {inputs.begin(), inputs.end()}, out});
    return out;
  }
  TensorType type(GradValue v) const override { return inner_.type(v); }
  std::optional<bool> is_train() const override { return inner_.is_train(); }

  const std::vector<Step>& steps() const { return steps_; }

 private:
  GradBuilder& inner_;
  std::vector<Step> steps_;
};

}  // namespace

void grad_of_composite(GradBuilder& b, const GradArgs& args, std::span<GradValue> in_grads, const ComposeFn& compose) {
  KILN_ASSERT(args.inputs.size() == in_grads.size());
  TapingBuilder tape(b);
  std::vector<GradValue> outputs = compose(tape, args.inputs);
  KILN_ASSERT(outputs.size() == args.out_grads.size());

  // Values that depend on an input whose gradient is wanted.
  std::unordered_set<int> live;
  for (size_t i = 0; i < args.inputs.size(); ++i)
    if (args.needs_grad[i]) live.insert(args.inputs[i].index);
  const auto& steps = tape.steps();
  std::vector<bool> step_live(steps.size(), false);
  for (size_t s = 0; s < steps.size(); ++s) {
    for (GradValue v : steps[s].inputs) step_live[s] = step_live[s] || live.contains(v.index);
    if (step_live[s])
      for (GradValue v : steps[s].outputs) live.insert(v.index);
  }

  std::unordered_map<int, GradValue> grads;  // by value index
  auto accumulate = [&](GradValue v, GradValue g) {
    if (g.is_none() || !live.contains(v.index)) return;
    auto [it, fresh] = grads.try_emplace(v.index, g);
    if (!fresh) it->second = grad_ops::add(b, it->second, g);
  };
  for (size_t k = 0; k < outputs.size(); ++k) accumulate(outputs[k], args.out_grads[k]);

  for (size_t s = steps.size(); s-- > 0;) {
    const auto& step = steps[s];
    if (!step_live[s]) continue;
    std::vector<GradValue> out_grads(step.outputs.size());
    bool any = false;
    for (size_t k = 0; k < step.outputs.size(); ++k) {
      auto it = grads.find(step.outputs[k].index);
      if (it != grads.end()) {
        out_grads[k] = it->second;
        any = true;
      }
    }
    const OpDef& def = op_def(step.op);
    if (!any || !def.differentiable) continue;  // no gradient arrives, or a constant (comparisons)
    KILN_CHECK(def.grad != nullptr, NotSupported, "{}: differentiable but has no gradient definition", def.name);
    // A sibling output without a gradient contributes zero.
    for (size_t k = 0; k < out_grads.size(); ++k)
      if (out_grads[k].is_none()) out_grads[k] = grad_ops::scalar(b, OpId::kMulScalar, step.outputs[k], 0);

    size_t n = step.inputs.size();
    std::unique_ptr<bool[]> needs(new bool[n]);
    std::vector<TensorType> types;
    for (size_t i = 0; i < n; ++i) {
      needs[i] = live.contains(step.inputs[i].index);
      types.push_back(b.type(step.inputs[i]));
    }
    std::vector<GradValue> outs(step.outputs.size());
    for (size_t k = 0; k < outs.size(); ++k)
      if (def.grad_keeps_output(k)) outs[k] = step.outputs[k];
    std::vector<GradValue> ins;
    if (def.grad_uses_inputs) ins = step.inputs;
    std::vector<GradValue> step_in_grads(n);
    GradArgs step_args{step.attrs, ins, outs, out_grads, {needs.get(), n}, types};
    def.grad(b, step_args, step_in_grads);
    for (size_t i = 0; i < n; ++i)
      if (needs[i]) accumulate(step.inputs[i], step_in_grads[i]);
  }

  for (size_t i = 0; i < args.inputs.size(); ++i) {
    if (!args.needs_grad[i]) continue;
    auto it = grads.find(args.inputs[i].index);
    if (it != grads.end()) in_grads[i] = it->second;
  }
}

}  // namespace kiln
