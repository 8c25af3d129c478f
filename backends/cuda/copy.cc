// Copies between the host and GPUs, and between GPUs (the CUDA backend's
// DeviceBackend::copy; runtime/device_backend.h).
//
// Host -> GPU (H2D stream of the GPU): chunk k is memcpy'd into pinned
// buffer k % 2, then cudaMemcpyAsync'd; before a buffer is refilled its
// previous chunk's event is awaited. GPU -> host (D2H stream): chunk k is
// cudaMemcpyAsync'd into buffer k % 2 while chunk k - 1 is memcpy'd out.
// GPU -> GPU: cudaMemcpyPeerAsync on the destination's D2D stream (same
// device: cudaMemcpyAsync). Every copy waits for its stream before
// returning: the engine op completes when the bytes have arrived. With
// asynchronous lanes a copy's stream first waits for the work queued on the
// compute stream of each GPU involved (cuda::order_after_compute): the
// source's producer, and any queued kernel still using the destination's
// memory before it was freed and reused.
#include <cstring>

#include "backends/cuda/pinned_staging.h"
#include "backends/cuda/device_runtime.h"
#include "runtime/device_backend.h"

namespace kiln {

namespace {

void host_to_device(void* dst, Device to, const void* src, size_t bytes) {
  const int id = to.id;
  cudaStream_t s = cuda::stream(id, cuda::StreamKind::kH2D);
  cuda::order_after_compute(id, s);
  cuda::bind_device(id);
  cuda::StagingLease lease(id, cuda::StreamKind::kH2D);
  int k = 0;
  for (size_t at = 0; at < bytes; at += cuda::kChunkBytes, ++k) {
    size_t n = std::min(cuda::kChunkBytes, bytes - at);
    int b = k % 2;
    if (k >= 2) KILN_CUDA_CHECK(cudaEventSynchronize(lease.event(b)), to);
    std::memcpy(lease.buffer(b), static_cast<const char*>(src) + at, n);
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
      std::memcpy(static_cast<char*>(dst) + previous_at, lease.buffer(pb), previous_n);
    }
    previous_at = at;
    previous_n = n;
  }
  if (k >= 1) {
    int pb = (k - 1) % 2;
    KILN_CUDA_CHECK(cudaEventSynchronize(lease.event(pb)), from);
    std::memcpy(static_cast<char*>(dst) + previous_at, lease.buffer(pb), previous_n);
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

}  // namespace cuda

}  // namespace kiln
