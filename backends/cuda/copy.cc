// Copies between the host and GPUs, and between GPUs (the CUDA backend's
// DeviceBackend::copy; runtime/device_backend.h).
//
// Host -> GPU (H2D stream of the GPU): chunk k is memcpy'd into pinned
// buffer k % 2, then cudaMemcpyAsync'd; before a buffer is refilled its
// previous chunk's event is awaited. GPU -> host (D2H stream): chunk k is
// cudaMemcpyAsync'd into buffer k % 2 while chunk k - 1 is memcpy'd out.
// The host side of a chunk is copied by several threads (host_copy): one
// thread's memcpy (about 10 GB/s) is slower than the DMA, which then waits.
// A host pointer that is already page-locked (cudaHostAlloc'd or registered)
// skips the staging: one cudaMemcpyAsync.
// GPU -> GPU: cudaMemcpyPeerAsync on the destination's D2D stream (same
// device: cudaMemcpyAsync). Every copy waits for its stream before
// returning: the engine op completes when the bytes have arrived. With
// asynchronous lanes a copy's stream first waits for the work queued on the
// compute stream of each GPU involved (cuda::order_after_compute): the
// source's producer, and any queued kernel still using the destination's
// memory before it was freed and reused.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backends/cuda/pinned_staging.h"
#include "backends/cuda/device_runtime.h"
#include "backends/cuda/testing.h"
#include "runtime/device_backend.h"

namespace kiln {

namespace {

// memcpy split over up to kCopyThreads threads in pieces of at least 1 MiB.
constexpr int kCopyThreads = 4;
constexpr size_t kCopyPiece = size_t{1} << 20;

void host_copy(void* dst, const void* src, size_t bytes) {
  const int pieces = static_cast<int>(std::min<size_t>(kCopyThreads, bytes / kCopyPiece));
  const int threads = std::min(pieces, std::max(1, omp_get_num_procs() / 2));
  if (threads <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const size_t per = (bytes + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int t = 0; t < threads; ++t) {
    const size_t at = static_cast<size_t>(t) * per;
    if (at < bytes) std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at, std::min(per, bytes - at));
  }
}

bool page_locked(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

void host_to_device(void* dst, Device to, const void* src, size_t bytes) {
  const int id = to.id;
  cudaStream_t s = cuda::stream(id, cuda::StreamKind::kH2D);
  cuda::order_after_compute(id, s);
  cuda::bind_device(id);
  if (page_locked(src)) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), to);
    KILN_CUDA_CHECK(cudaStreamSynchronize(s), to);
    return;
  }
  cuda::StagingLease lease(id, cuda::StreamKind::kH2D);
  int k = 0;
  for (size_t at = 0; at < bytes; at += cuda::kChunkBytes, ++k) {
    size_t n = std::min(cuda::kChunkBytes, bytes - at);
    int b = k % 2;
    if (k >= 2) KILN_CUDA_CHECK(cudaEventSynchronize(lease.event(b)), to);
    host_copy(lease.buffer(b), static_cast<const char*>(src) + at, n);
    KILN_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + at, lease.buffer(b), n, cudaMemcpyHostToDevice, s), to);
    KILN_CUDA_CHECK(cudaEventRecord(lease.event(b), s), to);
  }
  KILN_CUDA_CHECK(cudaStreamSynchronize(s), to);
}

void device_to_host(void* dst, const void* src, Device from, size_t bytes) {
  const int id = from.id;
  cudaStream_t s = cuda::stream(id, cuda::StreamKind::kD2H);
  cuda::order_after_compute(id, s);
  cuda::bind_device(id);
  if (page_locked(dst)) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), from);
    KILN_CUDA_CHECK(cudaStreamSynchronize(s), from);
    return;
  }
  cuda::StagingLease lease(id, cuda::StreamKind::kD2H);
  size_t previous_at = 0, previous_n = 0;
  int k = 0;
  for (size_t at = 0; at < bytes; at += cuda::kChunkBytes, ++k) {
    size_t n = std::min(cuda::kChunkBytes, bytes - at);
    int b = k % 2;
    KILN_CUDA_CHECK(cudaMemcpyAsync(lease.buffer(b), static_cast<const char*>(src) + at, n, cudaMemcpyDeviceToHost, s),
                    from);
    KILN_CUDA_CHECK(cudaEventRecord(lease.event(b), s), from);
    if (k >= 1) {  // drain the previous chunk while this one is in flight
      int pb = 1 - b;
      KILN_CUDA_CHECK(cudaEventSynchronize(lease.event(pb)), from);
      host_copy(static_cast<char*>(dst) + previous_at, lease.buffer(pb), previous_n);
    }
    previous_at = at;
    previous_n = n;
  }
  if (k >= 1) {
    int pb = (k - 1) % 2;
    KILN_CUDA_CHECK(cudaEventSynchronize(lease.event(pb)), from);
    host_copy(static_cast<char*>(dst) + previous_at, lease.buffer(pb), previous_n);
  }
}

void device_to_device(void* dst, Device to, const void* src, Device from, size_t bytes) {
  cudaStream_t s = cuda::stream(to.id, cuda::StreamKind::kD2D);
  cuda::order_after_compute(to.id, s);
  if (from != to) cuda::order_after_compute(from.id, s);
  cuda::bind_device(to.id);
  if (to == from) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), to);
  } else {
    KILN_CUDA_CHECK(cudaMemcpyPeerAsync(dst, to.id, src, from.id, bytes, s), to);
  }
  KILN_CUDA_CHECK(cudaStreamSynchronize(s), to);
}

}  // namespace

namespace cuda {

void copy(void* dst, Device to, const void* src, Device from, size_t bytes) {
  if (bytes == 0) return;
  if (from.is_cpu() && to.is_cuda()) return host_to_device(dst, to, src, bytes);
  if (from.is_cuda() && to.is_cpu()) return device_to_host(dst, src, from, bytes);
  if (from.is_cuda() && to.is_cuda()) return device_to_device(dst, to, src, from, bytes);
  std::memcpy(dst, src, bytes);  // cpu -> cpu
}

namespace testing {

double pinned_copy_gbps(int device, size_t bytes, bool to_device) {
  const Device dev = Device::cuda(device);
  bind_device(device);
  void* host = nullptr;
  void* gpu = nullptr;
  KILN_CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), dev);
  KILN_CUDA_CHECK(cudaMalloc(&gpu, bytes), dev);
  std::memset(host, 1, bytes);
  cudaStream_t s = stream(device, to_device ? StreamKind::kH2D : StreamKind::kD2H);
  double best = 0;
  for (int i = 0; i < 6; ++i) {  // the first is a warm-up
    auto start = std::chrono::steady_clock::now();
    KILN_CUDA_CHECK(cudaMemcpyAsync(to_device ? gpu : host, to_device ? host : gpu, bytes,
                                    to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s),
                    dev);
    KILN_CUDA_CHECK(cudaStreamSynchronize(s), dev);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0) best = std::max(best, static_cast<double>(bytes) / seconds * 1e-9);
  }
  (void)cudaFree(gpu);
  (void)cudaFreeHost(host);
  return best;
}

}  // namespace testing

}  // namespace cuda

}  // namespace kiln
