// Per-GPU runtime state: streams, library handles, deferred frees.
//
//   cuda::bind_device(0);                                    // cudaSetDevice for this thread
//   cudaStream_t s = cuda::stream(0, cuda::StreamKind::kCompute);
//   cublasHandle_t h = cuda::cublas_handle(0, s);            // this thread's handle, bound to s
//   cuda::free_after_sync(workspace);                        // freed once the op's stream is synchronized
//
// Each GPU has four streams, created on first use and kept until exit:
// compute (the engine's compute lane: every kernel) and H2D, D2H, D2D (the
// engine's copy lane picks one by direction). All are non-blocking streams
// (they do not synchronize with the legacy default stream).
//
// Completion design (see README.md), two modes (lanes_async()):
//  - synchronous (KILN_CUDA_LANES=sync, for debugging): an engine operation on
//    a CUDA lane ends with cudaStreamSynchronize on its stream
//    (engine_lane.cc), MXNet's classic scheme. When an op completes its
//    kernels have finished, device memory it used may be reused at once, and
//    an asynchronous kernel error surfaces in that very op, with its name.
//  - asynchronous (the default): a compute-lane op completes once
//    its work is queued on the GPU's one compute stream. Every consumer of a
//    GPU array is either a later compute op (ordered by the stream) or a copy,
//    and a copy first makes its stream wait for the compute stream
//    (order_after_compute), which also covers memory freed by a queued kernel
//    and reused by the copy. Waits drain the compute streams
//    (drain_lanes, DeviceBackend::drain). A kernel error then surfaces at the
//    next synchronization, not in the op that caused it.
//
// Thread safety: streams are shared; cuBLAS/cuDNN handles are per thread and
// per device (a handle must not be used by two threads at once).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#if defined(KILN_HAVE_CUDNN)
#include <cudnn.h>
#endif

#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/check.h"
#include "runtime/engine.h"
#include "runtime/storage.h"

namespace kiln::cuda {

enum class StreamKind : int { kCompute = 0, kH2D = 1, kD2H = 2, kD2D = 3 };
inline constexpr int kNumStreamKinds = 4;

// Makes `device` current for the calling thread. Throws DeviceError.
void bind_device(int device);

// The stream of `kind` on `device` (created on first use).
cudaStream_t stream(int device, StreamKind kind);

// This thread's cuBLAS handle for `device`, set to `s` (TF32 math when
// allowed, see tf32_allowed()).
cublasHandle_t cublas_handle(int device, cudaStream_t s);
#if defined(KILN_HAVE_CUDNN)
cudnnHandle_t cudnn_handle(int device, cudaStream_t s);
#endif

// Whether float32 GEMMs and convolutions may use TF32 tensor cores. On by
// default, as PyTorch's cuDNN convolutions (10-bit mantissa products, float32
// accumulation: relative error near 3e-4); KILN_CUDA_TF32=0 in the environment
// or set_tf32_allowed(false) turns it off, and results then match the CPU to
// float32 precision (op_parity_test runs that way).
bool tf32_allowed();
void set_tf32_allowed(bool allowed);

// Whether compute-lane ops complete at launch (the default) rather than after
// a stream synchronize (KILN_CUDA_LANES=sync); read once from the
// environment, or set by set_lanes_async while no GPU work is pending.
bool lanes_async();
void set_lanes_async(bool async);
// Marks `device` as having queued work that a wait must drain (async mode).
void note_queued_work(int device);
// Waits for the compute stream of every GPU marked by note_queued_work.
void drain_queued_work();
// Makes `s` (a copy stream) wait for the work queued so far on the compute
// stream of `device` (async mode; a no-op in synchronous mode).
void order_after_compute(int device, cudaStream_t s);

// Frees `block` after the current CUDA lane op has synchronized its stream
// (for workspaces and temporaries a kernel launches work on); in async mode,
// at the end of the op (later users are ordered after its kernels by the
// stream). Outside a CUDA lane op (no op running on this thread) it
// synchronizes the device and frees at once.
void free_after_sync(storage::Block block);
// A temporary device buffer for the current op: allocated from the device's
// pool, freed (free_after_sync) once the op's stream has been synchronized.
struct Scratch {
  storage::Block block;
  Scratch(Device device, size_t bytes) : block(storage::pool(device).alloc(bytes)) {}
  ~Scratch() { free_after_sync(block); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return block.ptr; }
};
// Called by the lane hook after cudaStreamSynchronize: frees what was deferred.
void flush_deferred_frees();
// True while this thread runs an engine op on a CUDA lane.
bool in_cuda_lane_op();
void set_in_cuda_lane_op(bool on);

// Graph capture (graph_capture.cc).
// Held while `device`'s compute stream is being captured, and by every
// thread that queues on or waits for that stream from outside its engine
// worker (order_after_compute, drain_queued_work): such a call during a
// capture would join the capture or invalidate it.
std::mutex& compute_stream_mutex(int device);
// Whether this thread is capturing its lane's stream: the allocator then
// lets cudaMalloc through (relaxed capture mode for that call) and does not
// free its cache on a failed allocation (cudaFree is not allowed).
bool capturing_on_this_thread();
void set_capturing_on_this_thread(bool on);
// The deferred frees of the current lane op: a mark, and the blocks deferred
// since the mark, taken out of the list (a captured graph keeps them).
size_t deferred_free_mark();
std::vector<storage::Block> take_deferred_frees(size_t mark);
// For drain's error message: "; the last CUDA graph replayed on cuda(d)
// before this wait: '<label>' ..." or "" when none was since the last drain.
std::string last_graph_replayed_note(int device);
// A drain of `device` succeeded: forget the last replayed graph.
void clear_last_graph_replayed(int device);

// What backend.cc puts behind the DeviceBackend interface:
// Runs an engine op on GPU ctx.device.id's lane (engine_lane.cc): binds the
// GPU, passes the lane's stream in ctx.stream, and returns once the op is
// complete in the current lane mode, throwing its errors.
void run_on_lane(engine::Fn& fn, engine::RunContext ctx);
// Waits for the work queued on every GPU (async mode; a no-op otherwise).
void drain_lanes();
// Copies host <-> GPU and GPU <-> GPU (copy.cc), inside an engine op on the
// copy lane of copy_lane_device(from, to); returns when the bytes have arrived.
void copy(void* dst, Device to, const void* src, Device from, size_t bytes);

}  // namespace kiln::cuda
