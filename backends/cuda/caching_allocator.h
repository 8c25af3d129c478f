// The caching device allocator: the storage::Pool of every cuda(i) device.
//
//   storage::Block b = storage::pool(Device::cuda(0)).alloc(1 << 20);  // cudaMalloc once, then cached
//   storage::pool(Device::cuda(0)).free(b);                             // kept for reuse
//   cuda::AllocatorStats s = cuda::allocator_stats(0);                  // + requested bytes, fragmentation
//   storage::pool(Device::cuda(0)).release_cached();                    // cudaFree every cached block
//
// Sizes are rounded as the CPU pool rounds them (storage::round_size), but
// never below 512 bytes; freed blocks are kept per rounded size. When
// cudaMalloc fails the pool frees its cache and retries once, then throws
// OutOfMemory naming the request, the pool's state and cudaMemGetInfo's
// free/total. A block is reusable as soon as it is freed: every engine op on
// a CUDA lane has synchronized its stream before it completes (README.md),
// so no kernel can still be using a block whose last array was released.
// While the calling thread captures a CUDA graph (graph_capture.cc), a
// cudaMalloc goes through in relaxed capture mode and a failed one throws
// OutOfMemory without freeing the cache (cudaFree is not allowed then).
// Thread safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ir/device.h"
#include "runtime/storage.h"

namespace kiln::cuda {

struct AllocatorStats {
  storage::Stats basic;
  int64_t requested_in_use = 0;  // bytes the callers asked for, of the blocks in use
  int64_t reserved = 0;          // bytes held from cudaMalloc (in use + cached)
  // 1 - requested_in_use / reserved: the share of reserved device memory that
  // serves no request (rounding waste plus cached blocks). 0 when nothing is reserved.
  double fragmentation() const;
  std::string to_string() const;
};

std::unique_ptr<storage::Pool> make_caching_allocator(Device device);

// The detailed statistics of cuda(device)'s pool (creates the pool).
AllocatorStats allocator_stats(int device);

}  // namespace kiln::cuda
