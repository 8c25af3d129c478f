// A GradBuilder (ir/grad.h) whose values are entries of a graph being built:
// each op appends a node, typed by the op's inference. The gradient pass runs
// GradFns through it; the decompose pass runs decompositions (ir/decompose.h).
// The graph twin of autograd's EagerGradBuilder (frontend/eager_grad_builder.h).
//
//   GraphGradBuilder b(graph, train_mode);
//   b.set_scope("attn0");                        // nodes "attn0/batch_dot", ...
//   GradValue y = b.op(OpId::kExp, {b.add(entry)});
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/grad.h"
#include "ir/graph.h"
#include "ir/ops/init.h"
#include "ir/ops/nn.h"

namespace kiln::passes {

class GraphGradBuilder final : public GradBuilder {
 public:
  GraphGradBuilder(ir::Graph& g, std::optional<bool> train_mode) : g_(g), train_mode_(train_mode) {}

  GradValue add(ir::Entry e) {
    values_.push_back(e);
    return GradValue{static_cast<int>(values_.size()) - 1};
  }
  ir::Entry entry(GradValue v) const {
    KILN_ASSERT(!v.is_none() && static_cast<size_t>(v.index) < values_.size());
    return values_[static_cast<size_t>(v.index)];
  }
  // New nodes are named "<scope>/<op>" (the gradient pass: "<forward node>_grad").
  void set_scope(std::string scope) { scope_ = std::move(scope); }

  std::vector<GradValue> apply(OpId op, std::span<const GradValue> inputs, const OpAttrs& attrs) override {
    std::vector<ir::Entry> in;
    in.reserve(inputs.size());
    for (GradValue v : inputs) in.push_back(entry(v));
    std::vector<GradValue> out;
    for (ir::Entry e : append(op, attrs, in)) out.push_back(add(e));
    return out;
  }

  TensorType type(GradValue v) const override { return g_.type(entry(v)); }
  std::optional<bool> is_train() const override { return train_mode_; }

  std::vector<ir::Entry> append(OpId op, const OpAttrs& attrs, std::span<const ir::Entry> in) {
    return g_.add_op(op, attrs, in, fresh_name(fmt::format("{}/{}", scope_, op_def(op).name)));
  }

  // Sum of `parts` (one add_n for several), or zeros of `type` for none.
  ir::Entry sum(const std::vector<ir::Entry>& parts, const TensorType& type) {
    if (parts.size() == 1) return parts[0];
    if (parts.empty()) {
      InitAttrs z;
      z.shape = type.shape;
      z.dtype = type.dtype;
      return append(OpId::kZeros, OpAttrs::make(z), {})[0];
    }
    AddNAttrs a;
    a.num_args = static_cast<int>(parts.size());
    return append(OpId::kAddN, OpAttrs::make(a), parts)[0];
  }

 private:
  std::string fresh_name(const std::string& base) {
    if (!g_.find(base)) return base;
    for (int& n = counters_[base];; ++n) {
      std::string name = fmt::format("{}{}", base, n);
      if (!g_.find(name)) return name;
    }
  }

  ir::Graph& g_;
  std::optional<bool> train_mode_;
  std::vector<ir::Entry> values_;
  std::string scope_;
  std::map<std::string, int> counters_;
};

}  // namespace kiln::passes
