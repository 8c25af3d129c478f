// CUDA graphs behind runtime/graph_capture.h: the CUDA backend's
// GraphCapture (backend.cc hands it out).
//
// A capture runs inside the engine op on the GPU's compute worker, on the
// compute stream, in thread-local capture mode (calls that would synchronize
// fail for this thread only; other threads' work on other streams goes on),
// holding compute_stream_mutex so no other thread records an event on the
// stream or waits for it meanwhile. What is recorded, in stream order:
//   1. per copy_in binding, cudaMemcpyAsync(staging, this call's memory)
//   2. the body's kernels, reading and writing the staging buffers
//   3. per copy_out binding, cudaMemcpyAsync(this call's memory, staging)
// The memcpy nodes of 1 and 3 are found as the capture's dependency right
// after each copy (cudaStreamGetCaptureInfo); a replay whose binding memory
// moved points them at the new memory (cudaGraphExecMemcpyNodeSetParams1D)
// before cudaGraphLaunch. Temporaries the kernels allocate through
// cuda::Scratch are deferred frees of the op (device_runtime.h): the capture
// takes those deferred during the body and the graph frees them when it is
// destroyed, so no other user gets their memory while the graph may run.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "backends/cuda/device_runtime.h"
#include "ir/error.h"
#include "runtime/graph_capture.h"

namespace kiln::cuda {

namespace {

constexpr int kMaxDevices = kMaxDevicesPerKind;

// Labels of the graphs captured so far, by id - 1 (kept until exit: a drain's
// error names the last one replayed, which may be gone by then).
std::mutex g_labels_mutex;
std::vector<std::string>& labels() {
  static auto* v = new std::vector<std::string>();
  return *v;
}
std::array<std::atomic<uint64_t>, kMaxDevices> g_last_replayed{};

uint64_t register_label(const std::string& label) {
  std::lock_guard lock(g_labels_mutex);
  labels().push_back(label);
  return labels().size();
}

std::string label_of(uint64_t id) {
  std::lock_guard lock(g_labels_mutex);
  return id >= 1 && id <= labels().size() ? labels()[id - 1] : std::string("?");
}

bool sticky(cudaError_t e) {
  return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure || e == cudaErrorAssert ||
         e == cudaErrorIllegalInstruction || e == cudaErrorMisalignedAddress || e == cudaErrorHardwareStackError;
}

// The one node the capture on `s` depends on now: the copy just recorded.
cudaGraphNode_t last_captured_copy(cudaStream_t s, Device dev) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  size_t num_deps = 0;
  KILN_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &deps, nullptr, &num_deps), dev);
  KILN_CHECK(status == cudaStreamCaptureStatusActive && num_deps == 1, DeviceError,
             "CUDA graph capture on {}: expected the staging copy as the capture's one dependency, found status {} "
             "with {} dependencies",
             dev, static_cast<int>(status), num_deps);
  cudaGraphNodeType type{};
  KILN_CUDA_CHECK(cudaGraphNodeGetType(deps[0], &type), dev);
  KILN_CHECK(type == cudaGraphNodeTypeMemcpy, DeviceError,
             "CUDA graph capture on {}: a staging copy was recorded as a node of type {}, not a memcpy node", dev,
             static_cast<int>(type));
  return deps[0];
}

class CudaGraph final : public CapturedGraph {
 public:
  CudaGraph(Device device, std::string label, std::span<const GraphBinding> bindings)
      : device_(device), label_(std::move(label)), bindings_(bindings.begin(), bindings.end()) {
    nodes_.resize(bindings_.size() * 2);
  }

  ~CudaGraph() override {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    if (previous != device_.id) (void)cudaSetDevice(device_.id);
    // An executable graph still queued is freed by CUDA once it has run.
    for (Instance& in : instances_) (void)cudaGraphExecDestroy(in.exec);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
    (void)cudaGetLastError();
    if (previous >= 0 && previous != device_.id) (void)cudaSetDevice(previous);
    // A replay may still be queued: every later user of these blocks is a
    // compute op after it on the stream or a copy ordered after the stream
    // (order_after_compute), as for any op's temporaries.
    for (const storage::Block& b : retained_) storage::pool(b.device).free(b);
  }

  void replay(const engine::RunContext& ctx, std::span<void* const> pointers) override {
    KILN_CHECK(pointers.size() == bindings_.size() && ctx.device == device_, InternalError,
               "CUDA graph '{}': replayed with {} bindings on {}, recorded with {} on {}", label_, pointers.size(),
               ctx.device, bindings_.size(), device_);
    cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
    try {
      Instance& in = instance_for(pointers);
      in.last_use = ++uses_;
      for (size_t i = 0; i < bindings_.size(); ++i) {
        if (pointers[i] == in.current[i]) continue;
        const GraphBinding& b = bindings_[i];
        if (b.copy_in)
          KILN_CUDA_CHECK(cudaGraphExecMemcpyNodeSetParams1D(in.exec, nodes_[2 * i], staging_[i], pointers[i], b.bytes,
                                                             cudaMemcpyDeviceToDevice),
                          device_);
        if (b.copy_out)
          KILN_CUDA_CHECK(cudaGraphExecMemcpyNodeSetParams1D(in.exec, nodes_[2 * i + 1], pointers[i], staging_[i],
                                                             b.bytes, cudaMemcpyDeviceToDevice),
                          device_);
        in.current[i] = pointers[i];
      }
      KILN_CUDA_CHECK(cudaGraphLaunch(in.exec, s), device_);
      g_last_replayed[static_cast<size_t>(device_.id)].store(id_, std::memory_order_relaxed);
      if (!lanes_async()) {
        // Synchronous lanes: report an execution error here, naming the graph.
        cudaError_t err = cudaStreamSynchronize(s);
        if (err != cudaSuccess) {
          (void)cudaGetLastError();
          throw DeviceError(fmt::format(
              "{} ({}){}; rerun with KILN_CUDA_GRAPHS=0 KILN_CUDA_LANES=sync to find the node", cudaGetErrorName(err),
              cudaGetErrorString(err), sticky(err) ? "; the CUDA context is now unusable: restart the process" : ""));
        }
      }
    } catch (Error& e) {
      e.add_context(fmt::format("replaying the CUDA graph of {} ({} nodes)", label_, num_nodes_));
      throw;
    }
  }

  size_t num_nodes() const override { return num_nodes_; }

 private:
  friend class CudaGraphCapture;
  // Executable instances of the graph, each with the binding memory its copy
  // nodes point at. Fresh outputs cycle through a few blocks of the caching
  // allocator (the previous call's output is usually still alive when the
  // next is allocated): an instance per block keeps re-pointing
  // (cudaGraphExecMemcpyNodeSetParams1D) off the common path.
  static constexpr size_t kMaxInstances = 4;
  struct Instance {
    cudaGraphExec_t exec = nullptr;
    std::vector<void*> current;
    uint64_t last_use = 0;
  };

  // The instance whose copies point at `pointers`; else a new one while
  // there are fewer than kMaxInstances (falling back to reuse if
  // instantiation fails), else the least recently used.
  Instance& instance_for(std::span<void* const> pointers) {
    for (Instance& in : instances_)
      if (std::equal(in.current.begin(), in.current.end(), pointers.begin(), pointers.end())) return in;
    if (instances_.size() < kMaxInstances) {
      cudaGraphExec_t exec = nullptr;
      if (cudaGraphInstantiate(&exec, graph_, 0) == cudaSuccess) {
        instances_.push_back({exec, captured_, 0});
        return instances_.back();
      }
      (void)cudaGetLastError();
    }
    return *std::min_element(instances_.begin(), instances_.end(),
                             [](const Instance& a, const Instance& b) { return a.last_use < b.last_use; });
  }

  Device device_;
  std::string label_;
  uint64_t id_ = 0;
  std::vector<GraphBinding> bindings_;
  std::vector<void*> staging_;            // per binding
  std::vector<void*> captured_;           // per binding: the memory at the capture (a new instance's)
  std::vector<cudaGraphNode_t> nodes_;    // per binding: copy in, copy out (null when none)
  std::vector<storage::Block> retained_;  // staging buffers and the kernels' temporaries
  cudaGraph_t graph_ = nullptr;           // kept: the copy nodes are its nodes
  std::vector<Instance> instances_;       // at least one once captured
  uint64_t uses_ = 0;
  size_t num_nodes_ = 0;
};

// Ops whose CUDA kernels read values back to the host and synchronize the
// stream (indices.cc): not allowed while capturing. Softmax with use_length
// does too; its op is shared with plain softmax, so a capture containing it
// fails and the executor falls back (kCaptureFailed). The softmax
// cross-entropy's label check needs no read-back (deferred_check.h: inside a
// capture its flag belongs to the graph and is read at every wait).
bool kernel_synchronizes(OpId op) {
  switch (op) {
    case OpId::kTake:
    case OpId::kTakeBackward:
    case OpId::kEmbedding:
    case OpId::kOneHot:
    case OpId::kPick:
    case OpId::kPickBackward:
      return true;
    default:
      return false;
  }
}

class CudaGraphCapture final : public GraphCapture {
 public:
  bool op_capturable(OpId op) override { return !kernel_synchronizes(op); }

  void synchronize(const engine::RunContext& ctx) override {
    KILN_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx.stream)), ctx.device);
  }

  CaptureResult capture(const engine::RunContext& ctx, std::span<const GraphBinding> bindings,
                        std::span<void* const> pointers, const std::string& label,
                        const std::function<void(std::span<void* const>)>& body) override {
    const Device dev = ctx.device;
    cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
    KILN_CHECK(pointers.size() == bindings.size() && s != nullptr, InternalError,
               "CUDA graph capture of {}: {} pointers for {} bindings, stream {}", label, pointers.size(),
               bindings.size(), static_cast<void*>(s));
    auto g = std::make_unique<CudaGraph>(dev, label, bindings);
    // Staging buffers, before the capture starts (a failure here is plain).
    try {
      for (const GraphBinding& b : bindings) {
        g->retained_.push_back(storage::pool(dev).alloc(b.bytes));
        g->staging_.push_back(g->retained_.back().ptr);
      }
    } catch (const OutOfMemory& e) {
      return {nullptr, GraphFallback::kOutOfMemory, e.what()};
    }

    std::optional<GraphFallback> failed;
    std::string detail;
    cudaGraph_t graph = nullptr;
    {
      std::lock_guard lock(compute_stream_mutex(dev.id));
      cudaError_t begin = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
      if (begin != cudaSuccess) {
        (void)cudaGetLastError();
        return {nullptr, GraphFallback::kCaptureFailed,
                fmt::format("cudaStreamBeginCapture on {} failed: {}", dev, cudaGetErrorName(begin))};
      }
      set_capturing_on_this_thread(true);
      const size_t mark = deferred_free_mark();
      try {
        for (size_t i = 0; i < bindings.size(); ++i) {
          if (!bindings[i].copy_in) continue;
          KILN_CUDA_CHECK(cudaMemcpyAsync(g->staging_[i], pointers[i], bindings[i].bytes, cudaMemcpyDeviceToDevice, s),
                          dev);
          g->nodes_[2 * i] = last_captured_copy(s, dev);
        }
        body(g->staging_);
        for (size_t i = 0; i < bindings.size(); ++i) {
          if (!bindings[i].copy_out) continue;
          KILN_CUDA_CHECK(cudaMemcpyAsync(pointers[i], g->staging_[i], bindings[i].bytes, cudaMemcpyDeviceToDevice, s),
                          dev);
          g->nodes_[2 * i + 1] = last_captured_copy(s, dev);
        }
      } catch (const OutOfMemory& e) {
        failed = GraphFallback::kOutOfMemory;
        detail = e.what();
      } catch (const std::exception& e) {
        failed = GraphFallback::kCaptureFailed;
        detail = e.what();
      }
      set_capturing_on_this_thread(false);
      // Always end the capture, also an invalidated one: the stream is then usable again.
      cudaError_t end = cudaStreamEndCapture(s, &graph);
      if (!failed && end != cudaSuccess) {
        failed = GraphFallback::kCaptureFailed;
        detail = fmt::format("cudaStreamEndCapture on {} failed: {} ({})", dev, cudaGetErrorName(end),
                             cudaGetErrorString(end));
      }
      (void)cudaGetLastError();
      // The temporaries the body took: the graph keeps them. After a
      // failure they stay deferred and go back to the pool at the end of the
      // op (nothing ran on them).
      if (!failed) {
        std::vector<storage::Block> temporaries = take_deferred_frees(mark);
        g->retained_.insert(g->retained_.end(), temporaries.begin(), temporaries.end());
      }
    }
    if (failed) {
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      return {nullptr, failed, std::move(detail)};
    }
    g->graph_ = graph;
    cudaGraphExec_t exec = nullptr;
    cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    if (inst != cudaSuccess) {
      (void)cudaGetLastError();
      return {nullptr, inst == cudaErrorMemoryAllocation ? GraphFallback::kOutOfMemory : GraphFallback::kCaptureFailed,
              fmt::format("cudaGraphInstantiate on {} failed: {} ({})", dev, cudaGetErrorName(inst),
                          cudaGetErrorString(inst))};
    }
    size_t n = 0;
    if (cudaGraphGetNodes(graph, nullptr, &n) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    g->num_nodes_ = n;
    g->captured_.assign(pointers.begin(), pointers.end());
    g->instances_.push_back({exec, g->captured_, 0});
    g->id_ = register_label(label);
    return {std::move(g), std::nullopt, {}};
  }
};

}  // namespace

GraphCapture& graph_capture() {
  static auto* gc = new CudaGraphCapture();  // leaked: used by engine workers until exit
  return *gc;
}

std::string last_graph_replayed_note(int device) {
  uint64_t id = g_last_replayed[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (id == 0) return {};
  return fmt::format(
      "; the last CUDA graph replayed on cuda({}) before this wait: {} (rerun with KILN_CUDA_GRAPHS=0 "
      "KILN_CUDA_LANES=sync to have the failing node named)",
      device, label_of(id));
}

void clear_last_graph_replayed(int device) {
  g_last_replayed[static_cast<size_t>(device)].store(0, std::memory_order_relaxed);
}

}  // namespace kiln::cuda
