// Device graphs: recording the work one engine operation queues on a device
// stream once, and replaying it per call with a single launch (CUDA graphs).
//
//   GraphCapture* gc = device_backend(kind).graph_capture();   // null: the kind cannot (CPUs)
//   // inside an engine op on ctx.device's compute lane:
//   auto r = gc->capture(ctx, bindings, pointers, "HybridNet predict f32[1,512]",
//                        [&](std::span<void* const> staging) { /* launch kernels on ctx.stream */ });
//   if (r.graph) r.graph->replay(ctx, pointers);     // the capture queued nothing: run it now
//   else         /* run the kernels normally; r.reason says why */;
//
// A capture records the work `body` launches on ctx.stream without running
// it. Memory whose address changes from call to call (inputs, fresh outputs)
// is named by a Binding: the body reads and writes a staging buffer the
// graph owns instead, and a replay copies the binding's current memory into
// the staging buffer first (copy_in) and back out after (copy_out), inside
// the graph. Everything else the body touches must keep its address for the
// graph's life (the caller's job: parameters, the executor's arena).
// Temporaries the kernels allocate while being captured are kept by the graph
// until it is destroyed and are used by nobody else.
//
// This file also holds what is backend-neutral: the on/off switch
// (KILN_CUDA_GRAPHS=0 turns replay off), the process-wide statistics, and the
// decision whether a sequence of ops may be captured at all
// (capture_blocker), which frontend/graph_executor.cc consults. The executor
// logs a failed capture or replay to stderr, one line per cache entry;
// KILN_LOG_CUDA_GRAPHS=1 also logs the fallbacks decided from the graph
// alone (random draws, ops that read back).
//
// Thread safety: stats and the switch may be read and written from any
// thread. A CapturedGraph is replayed by one engine operation at a time (the
// caller serializes); capture() may run on several devices' workers at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ir/op.h"
#include "runtime/engine.h"

namespace kiln {

// Why an engine operation that could have replayed a graph ran its kernels
// one launch at a time instead.
enum class GraphFallback : int8_t {
  kDisabled = 0,   // KILN_CUDA_GRAPHS=0 or graph_capture_set_enabled(false)
  kRandomPerCall,  // a step draws new random values per call (Dropout in training, random ops)
  kUnsafeOp,       // an op whose kernel reads values back to the host or synchronizes
  kEmptyArray,     // an input or output with no elements (nothing to copy in or out)
  kCaptureFailed,  // the capture itself failed (a call that is not allowed while capturing)
  kOutOfMemory,    // the staging buffers or a temporary did not fit while capturing
  kModeChanged,    // the call's train/predict mode differs from the captured one
  kReplayFailed,   // a replay failed: later calls run normally
  kMemoryMoves,    // per-call memory used in place (a training step's block) moved too often
};
inline constexpr int kNumGraphFallbacks = 9;
std::string_view graph_fallback_name(GraphFallback reason);

// Process-wide counters (relaxed atomics; a snapshot is not one instant).
struct GraphCaptureStats {
  int64_t captures = 0;                        // graphs recorded and instantiated
  int64_t recaptures = 0;                      // of those, re-recorded because a parameter's storage moved
  int64_t replays = 0;                         // engine operations that ran as one graph launch
  int64_t warmups = 0;                         // runs before a capture (the first run of each segment)
  int64_t fallbacks[kNumGraphFallbacks] = {};  // runs without a graph, by reason
  int64_t total_fallbacks() const;
  // "captures 2 (recaptured 0), replays 998, warm-up runs 2, fallbacks 0" plus
  // ": random per call 3, ..." for each reason with a count.
  std::string to_string() const;
};
GraphCaptureStats graph_capture_stats();
void graph_capture_reset_stats();
// Counting, for the executor and the backends.
void graph_capture_count_capture(bool recapture);
void graph_capture_count_replay();
void graph_capture_count_warmup();
void graph_capture_count_fallback(GraphFallback reason);

// Whether engine operations may replay device graphs: KILN_CUDA_GRAPHS (on
// unless it is "0"), read once, or what graph_capture_set_enabled said last.
// Graphs recorded earlier are kept but not replayed while off.
bool graph_capture_enabled();
void graph_capture_set_enabled(bool on);

// The decision logic: why `ops` (the kernels one engine operation runs, in
// order) cannot be recorded as one graph, or nullopt when they can.
// `op_capturable` says whether the device's kernel of an op may be captured
// (GraphCapture::op_capturable); `draws_random[i]` whether op i draws new
// random values in this call; `empty_binding` whether an input or output has
// no elements. `detail` receives the op name for kUnsafeOp and kRandomPerCall.
std::optional<GraphFallback> capture_blocker(std::span<const OpId> ops, std::span<const bool> draws_random,
                                             bool empty_binding, const std::function<bool(OpId)>& op_capturable,
                                             std::string* detail = nullptr);

// Memory the body reaches through a staging buffer (see above).
struct GraphBinding {
  size_t bytes = 0;       // > 0
  bool copy_in = false;   // the body reads it before writing it (or only reads it)
  bool copy_out = false;  // the body writes it
};

class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  // Inside an engine op on the compute lane of the device it was recorded on
  // (ctx as the backend passed it): queues the copies in, the recorded work
  // and the copies out on ctx.stream, with pointers[i] the current memory of
  // binding i (device memory of at least its bytes). Throws DeviceError
  // naming the graph's label; with synchronous lanes it waits for the replay,
  // so an execution error is reported here, also naming the graph.
  virtual void replay(const engine::RunContext& ctx, std::span<void* const> pointers) = 0;
  // Nodes in the recorded graph (for messages and tests).
  virtual size_t num_nodes() const = 0;
};

struct CaptureResult {
  std::unique_ptr<CapturedGraph> graph;  // null: not captured, see reason
  std::optional<GraphFallback> reason;   // kCaptureFailed or kOutOfMemory when graph is null
  std::string detail;                    // what failed (the error's message)
};

class GraphCapture {
 public:
  virtual ~GraphCapture() = default;
  // Whether the kernel of `op` on this kind may be captured: false for
  // kernels that read values back to the host or synchronize a stream.
  virtual bool op_capturable(OpId op) = 0;
  // Inside an engine op on ctx.device's compute lane: records what `body`
  // launches on ctx.stream, given one staging buffer per binding (in order),
  // and instantiates it for replay. `pointers` are this call's binding
  // memory (the first replay may reuse them). Nothing is queued or run: the
  // caller replays the graph (or, on failure, runs the kernels normally).
  // A failure (the body threw, a call not allowed while capturing, out of
  // memory) ends the capture, discards what was recorded, leaves the stream
  // usable and CUDA's last error cleared, and returns a null graph with the
  // reason; `label` names the graph in its errors and the backend's messages.
  virtual CaptureResult capture(const engine::RunContext& ctx, std::span<const GraphBinding> bindings,
                                std::span<void* const> pointers, const std::string& label,
                                const std::function<void(std::span<void* const> staging)>& body) = 0;
  // Waits for ctx.stream; throws the device's error (for locating the node
  // of a failed replay by running the steps one by one).
  virtual void synchronize(const engine::RunContext& ctx) = 0;
};

}  // namespace kiln
