// GraphExecutor: a traced graph compiled into one engine operation.
//
//   GraphExecutor exec(traced);                   // once per CachedOp entry
//   std::vector<NDArray> y = exec.run(inputs, /*is_train=*/false);
//
// Compilation resolves every op node's kernel for the graph's device and
// gives every intermediate value an offset in one arena, reusing the storage
// of values whose last reader has run (liveness over the topological order).
// A run allocates only the graph's outputs, then pushes a single engine
// operation that reads the inputs, parameters and constants, writes the
// outputs, the arena and any aux state an op mutates, and calls the kernels
// in order on the worker. So a call costs one engine push however many nodes
// the graph has (MXNet's bulk execution, for the whole graph).
//
// Calls on one executor are ordered by the arena's engine variable: they may
// come from several threads and overlap freely with other work.
//
// Segments: `split_into_segments(n)` makes a run push up to n engine
// operations instead of one, each a consecutive range of the steps that ends
// where a graph output has just been written. An output is then ready when
// its segment finishes, not when the whole graph has: a training step's
// backward part uses this so that data-parallel gradient aggregation of the
// last layers overlaps the backward of the first (MXNet's bulk size). The
// segments run in order (they all write the arena).
//
// With the profiler on (runtime/profiler.h, KILN_PROFILE=trace.json), every
// node's kernel is an event of its own, "CachedOp/<op>", inside the
// CachedOp's event.
//
// Device graphs (runtime/graph_capture.h; CUDA graphs): on a device whose
// backend records graphs, under the threaded engine, each segment runs its
// kernels normally the first time, is recorded as one graph the second time
// and is replayed from then on, so a call costs one engine push and one graph
// launch. The graph reads the call's inputs and writes its outputs (fresh
// arrays, as without graphs) through staging buffers it owns, copied inside
// the graph; parameters, constants and the arena are used in place, and a
// segment whose parameter got new storage is recorded again. Segments that
// cannot be recorded (random draws per call, ops whose kernels read values
// back, a failed capture, KILN_CUDA_GRAPHS=0) run normally and are counted
// by reason (graph_capture_stats). The profiler on turns replay off (its
// per-node events need the kernels launched one by one).
//
// Static values: an executor built without a block layout (inference) moves
// the values that depend only on parameters and constants -- folded, cast or
// transposed weights -- into a static part computed on the first call and
// again only after a write to one of its sources is pushed
// (frontend/static_values.h); the graph proper reads them as constants.
//
// The executor does not record autograd (TrainProgram puts it on the tape).
// Dropout draws a new mask per call, and _random_uniform/_random_normal new
// values, at the call, from the device's streams (as nd::dropout and
// nd::random do). Other random ops are not supported (`supports` says so).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "frontend/ndarray.h"
#include "frontend/trace.h"

namespace kiln {

class GraphExecutor {
 public:
  // A per-call block of memory some values live in, instead of arrays of
  // their own (TrainProgram: the values a training step's forward part saves
  // for its backward part).
  struct BlockLayout {
    // Per graph output: where in the block the run writes it (a byte offset,
    // a multiple of passes::MemoryPlan::kAlignment), or -1 for a fresh array.
    // An output in the block must be an op's output that no other graph
    // output names.
    std::vector<int64_t> outputs;
    // Per input: where in the block the value lies when the run starts, or
    // -1 when it comes from `inputs`. Such values are consumed: the run
    // reuses their storage once their last reader ran (the block is part of
    // the memory plan's arena), so the block holds garbage afterwards.
    std::vector<int64_t> inputs;
    int64_t bytes = 0;  // the block's size, a multiple of kAlignment
  };

  explicit GraphExecutor(std::shared_ptr<const trace::TracedGraph> traced);
  GraphExecutor(std::shared_ptr<const trace::TracedGraph> traced, BlockLayout layout);
  ~GraphExecutor();

  // False when the graph holds random ops other than Dropout, _random_uniform
  // and _random_normal (their values must change per call).
  static bool supports(const ir::Graph& g);

  struct RunArgs {
    // The call's block (uint8, at least BlockLayout::bytes) when the layout
    // places values in it; written by the run.
    NDArray block;
    // Per graph output, optional: an array to write the output into instead
    // of a fresh one (same shape, dtype and device; used only for an output
    // that no other graph output names and that an op writes).
    std::span<const NDArray> outputs_into;
  };

  // Runs the graph on `inputs` (one per input node, types as traced; ignored
  // for inputs that lie in the block) with the parameters' current arrays;
  // returns the outputs (queued; none for outputs written into the block).
  std::vector<NDArray> run(std::span<const NDArray> inputs, bool is_train, const RunArgs& args);
  std::vector<NDArray> run(std::span<const NDArray> inputs, bool is_train) { return run(inputs, is_train, RunArgs{}); }

  // Runs as up to `max_segments` engine operations (at least 1). Cuts fall
  // after steps that write a graph output, spread so that the segments hold
  // about equal numbers of steps. Not thread-safe with run().
  void split_into_segments(int max_segments);
  int num_segments() const;

  // Makes `a` and `b` use one arena of the larger size (for programs that
  // never run at the same time, such as a training step's forward and
  // backward: calls are still ordered by the shared arena's variable).
  static void share_arena(GraphExecutor& a, GraphExecutor& b);

  int64_t arena_bytes() const;
  // The arena a plan without reuse would need.
  int64_t naive_bytes() const;

  // Names the executor in messages and in its device graphs' errors
  // ("HybridNet (predict, f32[1,512] on cuda(0))"). Not thread-safe with run().
  void set_label(std::string label);

 private:
  struct Program;
  struct Call;
  struct CaptureSlot;
  // The device-graph state of the segment of steps [begin, end).
  static std::shared_ptr<CaptureSlot> make_capture_slot(const Program& p, size_t begin, size_t end);
  // Sets the segments ending before the given step indices (the last is the
  // number of steps) and each one's externals.
  static void set_segments(Program& p, const std::vector<size_t>& ends);
  std::shared_ptr<const trace::TracedGraph> traced_;
  std::shared_ptr<Program> program_;
};

}  // namespace kiln
