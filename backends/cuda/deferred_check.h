// Errors a kernel finds in its input data (a class label out of range, an
// index past the end) reported without reading a flag back after every op.
//
//   int* flag = cuda::deferred_check_begin(id, s);         // two ints in mapped pinned memory
//   launch_kernel(..., flag, s);                           // on a bad row r: atomicCAS(flag, -1, r), then flag[1] =
//   payload cuda::deferred_check_end(id, flag, s, "softmax_cross_entropy", [=](int row, int payload) { return ...; });
//
// The flag lives in page-locked host memory mapped into the GPU's address
// space: the kernel writes it directly, no copy is queued. flag[0] is -1 until
// a thread claims it with atomicCAS(flag, -1, row); only the claiming thread
// writes flag[1] (a payload, e.g. the bad label's float bits).
//
// When the flag is read (two modes, device_runtime.h's lanes_async()):
//  - synchronous lanes: deferred_check_end synchronizes the stream and
//    throws at once, in the op that launched the kernel;
//  - asynchronous lanes (the default): deferred_check_end records an event
//    and returns. A later deferred_check_begin on the same GPU reads the
//    flags of finished kernels without waiting (cudaEventQuery), and
//    deferred_check_drain (called by every wait, after the compute stream
//    has been synchronized) reads all of them. So a bad label surfaces at the
//    next wait or the next checked op on that GPU, like any asynchronous GPU
//    error, and its message says so.
// Inside a CUDA graph capture on `s` (backends/cuda/graph_capture.h) the
// flag belongs to the graph: it is never handed out again, nothing is
// queried or recorded while capturing, and deferred_check_drain reads it
// (and resets it) after the graph's replays: every wait with asynchronous
// lanes, and, with synchronous lanes, the end of every op on the GPU (so a
// bad label in a replayed step is reported by the op that replayed it).
//
// A failed check throws ValueError with describe(row, payload); in the op
// itself (synchronous lanes) the engine prefixes the op and device as for
// any kernel error, and at a later wait the message names `op` and the GPU
// itself and says where it surfaced. Each flag is read once; up to kFlagsPerDevice
// may be in flight per GPU (begin then waits for the oldest).
//
// Thread safety: all functions may be called from any thread; each GPU's
// flags are guarded by their own mutex.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>

namespace kiln::cuda {

inline constexpr int kFlagsPerDevice = 256;

using DescribeFailure = std::function<std::string(int row, int payload)>;

// A flag for one launch on `device`, set to {-1, 0}; its device address.
// Throws ValueError for an earlier failed check found finished on the way.
int* deferred_check_begin(int device, cudaStream_t s);
// Hands the flag back after its kernel was queued on `s` (see above).
// `op` must outlive the check (a string literal).
void deferred_check_end(int device, int* flag, cudaStream_t s, const char* op, DescribeFailure describe);
// Reads every pending flag of `device` and the flags CUDA graphs hold (its
// compute stream already synchronized); throws ValueError for the first
// failed one, releasing all.
void deferred_check_drain(int device);

}  // namespace kiln::cuda
