// Tracing: running a block's ordinary forward on symbolic arrays to record
// an ir::Graph (what hybridize() compiles).
//
//   trace::Tracer tracer("HybridNet", Device::cpu(0), param_names);
//   NDArray x = tracer.add_input("data", {Shape{1, 512}, DType::kFloat32});
//   NDArray y = net.forward(x);                 // invoke records nodes; nothing runs
//   trace::TracedGraph traced = tracer.finish({&y, 1});
//
// While a Tracer is alive on a thread, every `invoke` on that thread records
// a node instead of queuing a kernel: symbolic inputs become the entries they
// stand for, concrete arrays captured from outside become constant nodes (the
// array is kept by the TracedGraph), and ops without inputs (nd::zeros inside
// forward) become nodes too. `Parameter::data` returns the symbolic value of a
// param node (aux node for auxiliary states), created on first use. In-place
// forms (`x += y`, `invoke(..., {.out = ...})`) rebind the symbolic handle to
// the new node: a graph has no mutation except through ops' mutated inputs.
//
// Reading values of a symbolic array (item, to_vector, printing, waiting)
// throws ValueError naming the traced block: that forward depends on data and
// cannot be compiled. Symbolic arrays must not escape their trace; using one
// afterwards throws.
//
// Dropout, _random_uniform and _random_normal nodes are recorded without the
// seed and offset the imperative call drew: executors draw new values per call.
//
// Thread safety: a Tracer belongs to the thread that created it; traces on
// different threads are independent.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "frontend/ndarray.h"
#include "frontend/nn/parameter.h"
#include "ir/graph.h"

namespace kiln::trace {

// A recorded forward: the graph and what its leaf nodes are bound to.
struct TracedGraph {
  ir::Graph graph;
  Device device;
  std::vector<ir::NodeId> inputs;  // input nodes, in call order
  std::vector<std::pair<ir::NodeId, nn::Parameter>> params;  // param and aux nodes
  std::vector<std::pair<ir::NodeId, NDArray>> consts;        // captured concrete arrays
};

class Tracer {
 public:
  // Starts tracing on this thread (ValueError if one is already running).
  // `what` names the block in errors; `param_names` maps Parameter::id() to
  // the node name to use (structural names from the traced block); others
  // use Parameter::name().
  Tracer(std::string what, Device device, std::unordered_map<const void*, std::string> param_names = {});
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  NDArray add_input(std::string name, TensorType type);
  // The symbolic value of `p` on `device` (the trace's device only).
  NDArray param(const nn::Parameter& p, Device device);
  // invoke's hook: records `op` and returns its symbolic outputs; rebinds
  // `out` (if given) to them.
  std::vector<NDArray> record(OpId op, std::span<const NDArray> inputs, const OpAttrs& attrs, std::span<NDArray> out);
  // Ends recording: the graph with `outputs` as its outputs.
  TracedGraph finish(std::span<const NDArray> outputs);

  const std::string& what() const { return what_; }
  uint64_t id() const { return id_; }

 private:
  ir::Entry entry_of(const NDArray& a, std::string_view op, size_t index);
  NDArray symbolic(ir::Entry e);

  std::string what_;
  uint64_t id_;
  Tracer* prev_;
  TracedGraph traced_;
  std::unordered_map<const void*, std::string> param_names_;
  std::unordered_map<const void*, ir::Entry> param_entries_;  // by Parameter::id()
  std::unordered_map<const void*, ir::Entry> const_entries_;  // by data pointer
  bool finished_ = false;
};

// The Tracer running on this thread, or null.
Tracer* current();

// No tracing in this scope (parameter initialization inside a traced forward
// computes real values).
class Suspend {
 public:
  Suspend();
  ~Suspend();
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;

 private:
  Tracer* saved_;
};

// The error for reading the values of symbolic array `a` (`what`: "item()").
[[noreturn]] void throw_read(const NDArray& a, std::string_view what);

}  // namespace kiln::trace
