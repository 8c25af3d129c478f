// Pinned (page-locked) host buffers through which host <-> GPU copies pass.
//
//   cuda::StagingLease lease(0, cuda::StreamKind::kH2D);   // this device and direction, exclusively
//   lease.buffer(k) ... lease.event(k)                      // two buffers (double buffering) and their events
//
// cudaMemcpyAsync from pageable memory is synchronous and goes through the
// driver's own small staging area; copying through our own pinned buffers in
// chunks lets the host copy of chunk k+1 overlap the DMA of chunk k. Each
// (device, direction) has two kChunkBytes buffers, allocated on first use
// and kept until exit; a lease holds them exclusively (a mutex), so copies
// from several threads (the naive engine) stay correct.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>

#include "backends/cuda/device_runtime.h"

namespace kiln::cuda {

inline constexpr size_t kChunkBytes = size_t{4} << 20;

class StagingLease {
 public:
  StagingLease(int device, StreamKind direction);
  ~StagingLease();
  StagingLease(const StagingLease&) = delete;
  StagingLease& operator=(const StagingLease&) = delete;

  void* buffer(int k) const;      // k in {0, 1}
  cudaEvent_t event(int k) const;  // recorded after the chunk that used buffer k

  struct Slot;  // per (device, direction): the buffers, their events, a mutex

 private:
  Slot* slot_;
};

}  // namespace kiln::cuda
