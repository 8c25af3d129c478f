// The values of a compiled graph that depend only on its parameters and
// constants (weights cast to 16 bits, BatchNorm statistics folded into
// convolution weights, weights transposed for channel-last convolutions),
// computed once and again only when a parameter changes, instead of on
// every call.
//
//   auto [main, statics] = StaticValues::split(traced);   // statics null: nothing to hoist
//   ...                                                    // per call of `main`:
//   if (statics) statics->refresh(is_train);               // recomputes after parameter writes
//
// split() takes the pure op nodes (passes/op_effects.h) all of whose inputs
// are parameters, aux states or constants -- or such nodes -- that no op of
// the graph mutates in place; the values of those nodes that other nodes read
// become constants of the main graph, bound to arrays this object owns. Values
// that are graph outputs stay in the main graph (outputs are fresh arrays per
// call). refresh() compares each source array's write sequence number
// (runtime/engine_writes.h) with the one it saw when it last computed the
// values: a write pushed to a parameter (an optimizer step, set_data,
// load_parameters) or a parameter bound to another array makes it recompute,
// through a GraphExecutor of the static part whose outputs are written into
// the constants' arrays, queued before the main graph's call that reads them.
// KILN_HOIST=0 turns splitting off (split returns the graph unchanged).
//
// Thread safety: refresh() may be called from several threads at once.
#pragma once

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "frontend/ndarray.h"
#include "frontend/trace.h"

namespace kiln {

class GraphExecutor;

class StaticValues {
 public:
  ~StaticValues();

  // The main graph and the static part's state (null when no value is static).
  static std::pair<std::shared_ptr<const trace::TracedGraph>, std::unique_ptr<StaticValues>> split(
      std::shared_ptr<const trace::TracedGraph> traced);

  // Recomputes the values when a source changed since the last computation.
  void refresh(bool is_train);

  // Computations so far (tests, benchmarks).
  int64_t computations() const;
  const trace::TracedGraph& graph() const { return *statics_; }

 private:
  StaticValues() = default;
  // fn(index, variable, its write number) for each parameter, then each constant, of the static part.
  template <typename Fn>
  void for_each_source(Fn&& fn) const;

  std::shared_ptr<const trace::TracedGraph> statics_;  // no inputs; outputs: the values
  std::unique_ptr<GraphExecutor> exec_;
  std::vector<NDArray> values_;  // bound as constants of the main graph
  mutable std::mutex mutex_;
  std::vector<std::pair<const engine::Var*, uint64_t>> seen_;  // at the last computation
  int64_t computations_ = 0;
};

}  // namespace kiln
