// The GradBuilder (ir/grad.h) that runs each op at once through invoke: its
// values are NDArrays. Autograd's backward runs GradFns through it, and
// invoke runs decompositions (ir/decompose.h) through it.
//
//   EagerGradBuilder b(x.device());
//   GradValue x = b.add(array);
//   NDArray y = b.value(b.op(OpId::kExp, {x}));
//
// Ops without inputs (zeros, arange: masks and fills a GradFn builds) are
// made on the builder's device. Not thread-safe; one per call.
#pragma once

#include <span>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/invoke.h"
#include "ir/grad.h"

namespace kiln {

class EagerGradBuilder final : public GradBuilder {
 public:
  explicit EagerGradBuilder(Device device) : device_(device) {}

  GradValue add(NDArray a) {
    values_.push_back(std::move(a));
    return GradValue{static_cast<int>(values_.size()) - 1};
  }
  const NDArray& value(GradValue v) const { return values_[static_cast<size_t>(v.index)]; }

  std::vector<GradValue> apply(OpId op, std::span<const GradValue> inputs, const OpAttrs& attrs) override {
    std::vector<NDArray> in;
    in.reserve(inputs.size());
    for (GradValue v : inputs) {
      KILN_ASSERT(!v.is_none());
      in.push_back(value(v));
    }
    std::vector<GradValue> out;
    for (NDArray& y : invoke(op, in, attrs, {.device = device_})) out.push_back(add(std::move(y)));
    return out;
  }

  TensorType type(GradValue v) const override { return {value(v).shape(), value(v).dtype()}; }
  // Autograd's backward sets the mode of the node being differentiated.
  std::optional<bool> is_train() const override { return autograd::is_training(); }

 private:
  Device device_;
  std::vector<NDArray> values_;
};

}  // namespace kiln
