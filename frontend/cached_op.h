// CachedOp: a hybridized block's compiled forms, one per call signature.
//
//   CachedOp op;                                  // held by the block's state
//   std::vector<NDArray> y = op.call(block, inputs);
//
// The key of an entry is (input shapes and dtypes, device, train/predict
// mode, mixed-precision dtype). Mixed precision comes from hybridize's
// `amp` option, else from an amp::Autocast scope around the call
// (frontend/amp.h); the amp-cast pass then applies its policy to the graph
// after BatchNorm folding and layer fusion (so folded weights are computed in
// float32 and cast once). A miss traces the block's forward (frontend/trace.h) into a graph,
// runs the optimization pipeline on it (common subexpressions, algebraic
// simplification, BatchNorm folding and Convolution/FullyConnected +
// activation fusion in predict mode, dead code;
// KILN_DUMP_GRAPHS=dir dumps each step), and stores it; the least recently
// used entry is dropped beyond `max_entries`. Every trace after the first is
// counted and explained (which part of the key changed): `retrace_log()`, and
// on stderr with KILN_LOG_RETRACE=1.
//
// A call binds the entry's graph to the inputs, the parameters' current
// arrays on the inputs' device and the captured constants. When autograd is
// not recording, the entry's GraphExecutor runs it as one engine operation
// from a static memory plan. While recording, the entry's TrainProgram
// (frontend/cached_op_train.h) runs the forward part of the gradient pass's
// graph and puts the CachedOp on the tape as one node whose backward is the
// backward part. Dropout draws a new mask per call on both paths. Graphs with
// random ops are evaluated node by node instead (eval_graph), the tape
// recording every op. Aux states such as BatchNorm's running
// statistics are updated in place on every path.
//
// Thread safety: call() may run from several threads at once on one CachedOp
// (lookups and traces are serialized by a mutex; evaluation is ordered by the
// engine).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "frontend/cached_op_train.h"
#include "frontend/graph_executor.h"
#include "frontend/ndarray.h"
#include "frontend/trace.h"

namespace kiln {

namespace nn {
class Block;
}

// Traces `block.forward` on symbolic inputs of `types` on `device` (input
// nodes "data", or "data0", "data1", ... for several), naming parameters by
// their structural names from `block`. `what` names the block in errors.
trace::TracedGraph trace_block(nn::Block& block, std::span<const TensorType> types, Device device,
                               const std::string& what);

class CachedOp {
 public:
  // amp: the 16-bit dtype every call compiles for (hybridize's option);
  // unset: the dtype of the amp::Autocast scope around each call, if any.
  explicit CachedOp(int max_entries = 16, std::optional<DType> amp = std::nullopt);

  // Runs `block`'s forward for `inputs` from the entry of their signature,
  // tracing `block.forward` first on a miss. Errors name the block by its
  // display_name(), which is built only on that slow path.
  std::vector<NDArray> call(nn::Block& block, std::span<const NDArray> inputs);

  // Number of traces so far (the first one included).
  int64_t num_traces() const;
  // One line per re-trace: "re-traced HybridNet: input 0 shape [32,784] -> [16,784]".
  std::vector<std::string> retrace_log() const;
  // The graph of the most recently used entry (null before the first call),
  // as optimized.
  std::shared_ptr<const trace::TracedGraph> last_graph() const;
  // The graph export writes, as traced (before optimization): the most
  // recently used predict-mode entry's, else the most recently used one's
  // (null before the first call).
  std::shared_ptr<const trace::TracedGraph> graph_for_export() const;
  // What the optimization pipeline did to the last traced graph, one line
  // per pass (passes::PassContext::report), followed, once an inference
  // executor was built, by the executor's passes (fuse-elementwise).
  std::string pass_report() const;
  // How the most recently used compiled training step spends memory
  // (TrainProgram::Memory); nullopt before one ran.
  std::optional<TrainProgram::Memory> train_memory() const;

 private:
  struct Key {
    std::vector<TensorType> inputs;
    Device device;
    bool train = false;
    std::optional<DType> amp;
    bool operator==(const Key&) const = default;
    // The key of `inputs` in mode `train` under `amp` would equal this one
    // (inputs already checked: not none).
    bool matches(std::span<const NDArray> inputs, bool train, std::optional<DType> amp) const;
  };
  struct Entry {
    Key key;
    std::shared_ptr<const trace::TracedGraph> traced;  // optimized
    std::shared_ptr<const trace::TracedGraph> raw;     // as traced (what export writes)
    bool compilable = false;  // GraphExecutor::supports(traced->graph), decided once
    // Compiled on the first call that can use it (autograd not recording).
    mutable std::once_flag compile_once;
    mutable std::unique_ptr<GraphExecutor> executor;
    // Compiled training steps, by which inputs need a gradient (null: not
    // compilable, evaluate op by op).
    mutable std::mutex train_mutex;
    mutable std::map<std::vector<bool>, std::shared_ptr<const TrainProgram>> train;
  };

  std::shared_ptr<const Entry> lookup(nn::Block& block, std::span<const NDArray> inputs);
  static std::string explain(const Key& before, const Key& after);
  // Runs `pipeline_text` (pass names, comma-separated) on traced.graph;
  // returns the pass report.
  std::string optimize(trace::TracedGraph& traced, bool train_mode, std::optional<DType> amp,
                       const std::string& what, std::string_view pipeline_text);

  int max_entries_;
  std::optional<DType> amp_;
  mutable std::mutex mutex_;
  std::list<std::shared_ptr<const Entry>> entries_;  // most recently used first
  int64_t num_traces_ = 0;
  std::vector<std::string> retrace_log_;
  std::string pass_report_;
  std::shared_ptr<const TrainProgram> last_train_;
};

// The passes a hybridized block's traced graph goes through before it runs
// for inference on `device`: the optimization pipeline (or KILN_PIPELINE),
// then the inference executor's fusions. A pipeline string for
// passes::run_pipeline (`kiln inspect --passes` shows what it does).
std::string inference_pipeline(Device device);

}  // namespace kiln
