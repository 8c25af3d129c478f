#include "backends/cuda/device_runtime.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string_view>
#include <vector>

#include "backends/cuda/deferred_check.h"
#include "backends/cuda/testing.h"

namespace kiln::cuda {

namespace {

constexpr int kMaxDevices = kMaxDevicesPerKind;

struct DeviceStreams {
  std::once_flag once;
  std::array<cudaStream_t, kNumStreamKinds> streams{};
};

std::array<DeviceStreams, kMaxDevices>& all_streams() {
  static auto* s = new std::array<DeviceStreams, kMaxDevices>();  // leaked: used until exit
  return *s;
}

DeviceStreams& device_streams(int device) {
  check_device(Device::cuda(device));
  DeviceStreams& d = all_streams()[static_cast<size_t>(device)];
  std::call_once(d.once, [&] {
    bind_device(device);
    Device dev = Device::cuda(device);
    for (auto& s : d.streams) KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), dev);
  });
  return d;
}

// Switches read once from the environment (-1: not read yet), on unless the
// variable says `off`; the set_ functions override them.
std::atomic<int> g_tf32{-1};   // KILN_CUDA_TF32=0 turns it off
std::atomic<int> g_async{-1};  // KILN_CUDA_LANES=sync turns it off

bool env_switch(std::atomic<int>& state, const char* var, std::string_view off) {
  int v = state.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv(var);
    v = env != nullptr && std::string_view(env) == off ? 0 : 1;
    state.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}
// GPUs that ran an op in async mode (never cleared: draining an idle stream
// costs a few microseconds).
std::array<std::atomic<bool>, kMaxDevices> g_queued{};

thread_local bool tl_in_lane_op = false;
thread_local bool tl_capturing = false;
thread_local std::vector<storage::Block> tl_deferred;
std::array<std::mutex, kMaxDevices> g_compute_mutex;

const char* cublas_text(cublasStatus_t s) { return cublasGetStatusString(s); }

}  // namespace

void bind_device(int device) { KILN_CUDA_CHECK(cudaSetDevice(device), Device::cuda(device)); }

cudaStream_t stream(int device, StreamKind kind) {
  return device_streams(device).streams[static_cast<size_t>(kind)];
}

bool tf32_allowed() { return env_switch(g_tf32, "KILN_CUDA_TF32", "0"); }

void set_tf32_allowed(bool allowed) { g_tf32.store(allowed ? 1 : 0, std::memory_order_relaxed); }

bool lanes_async() { return env_switch(g_async, "KILN_CUDA_LANES", "sync"); }

void set_lanes_async(bool async) { g_async.store(async ? 1 : 0, std::memory_order_relaxed); }

void note_queued_work(int device) {
  std::atomic<bool>& q = g_queued[static_cast<size_t>(device)];
  if (!q.load(std::memory_order_relaxed)) q.store(true, std::memory_order_release);
}

void drain_queued_work() {
  std::exception_ptr first;  // every GPU is drained before the first failure is thrown
  for (int d = 0; d < kMaxDevices; ++d) {
    if (!g_queued[static_cast<size_t>(d)].load(std::memory_order_acquire)) continue;
    bind_device(d);
    cudaError_t err = cudaSuccess;
    {
      std::lock_guard lock(compute_stream_mutex(d));  // not while a worker captures the stream
      err = cudaStreamSynchronize(stream(d, StreamKind::kCompute));
    }
    try {
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        throw Error(fmt::format(
            "cuda({}): an asynchronous GPU error surfaced at a wait: {} ({}); with asynchronous lanes (the default) "
            "the op that caused it is not known: rerun with KILN_CUDA_LANES=sync to have the failing op named{}",
            d, cudaGetErrorName(err), cudaGetErrorString(err), last_graph_replayed_note(d)));
      }
      deferred_check_drain(d);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    clear_last_graph_replayed(d);
  }
  if (first) std::rethrow_exception(first);
}

void order_after_compute(int device, cudaStream_t s) {
  if (!lanes_async() || !g_queued[static_cast<size_t>(device)].load(std::memory_order_acquire)) return;
  // One event per thread and GPU, recorded anew each time: a wait captures
  // the event's state when it is issued.
  thread_local std::array<cudaEvent_t, kMaxDevices> events{};
  cudaEvent_t& e = events[static_cast<size_t>(device)];
  Device dev = Device::cuda(device);
  bind_device(device);  // the event lives on `device`; callers bind their own device afterwards
  if (e == nullptr) KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), dev);
  // Not while the compute worker captures the stream: the record would join the capture.
  std::lock_guard lock(compute_stream_mutex(device));
  KILN_CUDA_CHECK(cudaEventRecord(e, stream(device, StreamKind::kCompute)), dev);
  KILN_CUDA_CHECK(cudaStreamWaitEvent(s, e, 0), dev);
}

// Each handle's workspace (cublasSetWorkspace): the same memory whether or
// not the stream is being captured into a CUDA graph, so cuBLAS picks the
// same algorithms in both cases (without one it may run without a workspace
// while capturing) and never allocates inside a capture. cuBLAS's
// recommendation for Hopper; kept until exit with the handle.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

cublasHandle_t cublas_handle(int device, cudaStream_t s) {
  thread_local std::array<cublasHandle_t, kMaxDevices> handles{};
  thread_local std::array<void*, kMaxDevices> workspaces{};
  Device dev = Device::cuda(device);
  cublasHandle_t& h = handles[static_cast<size_t>(device)];
  void*& ws = workspaces[static_cast<size_t>(device)];
  if (h == nullptr) {
    cublasStatus_t st = cublasCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS) throw_library_error("cuBLAS", st, cublas_text(st), "cublasCreate", dev);
    KILN_CUDA_CHECK(cudaMalloc(&ws, kCublasWorkspaceBytes), dev);
  }
  cublasStatus_t st = cublasSetStream(h, s);
  if (st != CUBLAS_STATUS_SUCCESS) throw_library_error("cuBLAS", st, cublas_text(st), "cublasSetStream", dev);
  // cublasSetStream resets the workspace to cuBLAS's own pool.
  st = cublasSetWorkspace(h, ws, kCublasWorkspaceBytes);
  if (st != CUBLAS_STATUS_SUCCESS) throw_library_error("cuBLAS", st, cublas_text(st), "cublasSetWorkspace", dev);
  st = cublasSetMathMode(h, tf32_allowed() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) throw_library_error("cuBLAS", st, cublas_text(st), "cublasSetMathMode", dev);
  return h;
}

#if defined(KILN_HAVE_CUDNN)
cudnnHandle_t cudnn_handle(int device, cudaStream_t s) {
  thread_local std::array<cudnnHandle_t, kMaxDevices> handles{};
  Device dev = Device::cuda(device);
  cudnnHandle_t& h = handles[static_cast<size_t>(device)];
  if (h == nullptr) {
    cudnnStatus_t st = cudnnCreate(&h);
    if (st != CUDNN_STATUS_SUCCESS) throw_library_error("cuDNN", st, cudnnGetErrorString(st), "cudnnCreate", dev);
  }
  cudnnStatus_t st = cudnnSetStream(h, s);
  if (st != CUDNN_STATUS_SUCCESS) throw_library_error("cuDNN", st, cudnnGetErrorString(st), "cudnnSetStream", dev);
  return h;
}
#endif

bool in_cuda_lane_op() { return tl_in_lane_op; }
void set_in_cuda_lane_op(bool on) { tl_in_lane_op = on; }

void free_after_sync(storage::Block block) {
  if (block.ptr == nullptr) return;
  if (tl_in_lane_op) {
    tl_deferred.push_back(block);
    return;
  }
  KILN_CUDA_CHECK(cudaDeviceSynchronize(), block.device);
  storage::pool(block.device).free(block);
}

std::mutex& compute_stream_mutex(int device) { return g_compute_mutex[static_cast<size_t>(device)]; }

bool capturing_on_this_thread() { return tl_capturing; }
void set_capturing_on_this_thread(bool on) { tl_capturing = on; }

size_t deferred_free_mark() { return tl_deferred.size(); }

std::vector<storage::Block> take_deferred_frees(size_t mark) {
  if (mark >= tl_deferred.size()) return {};
  std::vector<storage::Block> taken(tl_deferred.begin() + static_cast<ptrdiff_t>(mark), tl_deferred.end());
  tl_deferred.resize(mark);
  return taken;
}

void flush_deferred_frees() {
  for (const storage::Block& b : tl_deferred) storage::pool(b.device).free(b);
  tl_deferred.clear();
}

namespace testing {

bool lanes_async() { return cuda::lanes_async(); }
void set_lanes_async(bool async) { cuda::set_lanes_async(async); }
bool compute_stream_idle(int device) {
  bind_device(device);
  std::lock_guard lock(compute_stream_mutex(device));
  return cudaStreamQuery(stream(device, StreamKind::kCompute)) == cudaSuccess;
}

}  // namespace testing

}  // namespace kiln::cuda
