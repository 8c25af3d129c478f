#include "backends/cuda/caching_allocator.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "backends/cuda/check.h"
#include "backends/cuda/device_runtime.h"

namespace kiln::cuda {

double AllocatorStats::fragmentation() const {
  if (reserved <= 0) return 0.0;
  return 1.0 - static_cast<double>(requested_in_use) / static_cast<double>(reserved);
}

std::string AllocatorStats::to_string() const {
  return fmt::format("{}; requested {} B of {} B reserved (fragmentation {:.1f}%)", basic.to_string(),
                     requested_in_use, reserved, 100.0 * fragmentation());
}

namespace {

constexpr size_t kMinBlock = 512;

// Makes `device` current for the scope and restores the previous device
// (allocations happen on frontend threads that may use several GPUs, and on
// engine workers that have bound their own).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) KILN_CUDA_CHECK(cudaSetDevice(device), Device::cuda(device));
    device_ = device;
  }
  ~DeviceScope() {
    if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  int device_ = 0;
};

class CachingAllocator final : public storage::Pool {
 public:
  explicit CachingAllocator(Device device) : device_(device) {}

  storage::Block alloc(size_t size) override {
    size_t rounded = std::max(kMinBlock, storage::round_size(size));
    std::lock_guard lock(mu_);
    ++stats_.num_allocs;
    void* p = nullptr;
    auto it = free_.find(rounded);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      stats_.cached -= static_cast<int64_t>(rounded);
      ++stats_.num_cache_hits;
    } else {
      DeviceScope scope(device_.id);
      p = system_alloc(rounded);
      // cudaFree is not allowed while this thread captures its stream: the
      // capture fails with OutOfMemory and the normal run that follows frees
      // the cache.
      if (p == nullptr && !capturing_on_this_thread()) {
        release_cached_locked();
        p = system_alloc(rounded);
      }
      if (p == nullptr) throw_oom(size, rounded);
      ++stats_.num_system_allocs;
    }
    stats_.in_use += static_cast<int64_t>(rounded);
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    requested_in_use_ += static_cast<int64_t>(size);
    live_[p] = size;
    return storage::Block{p, rounded, device_};
  }

  void free(storage::Block block) override {
    if (block.ptr == nullptr) return;
    std::lock_guard lock(mu_);
    auto it = live_.find(block.ptr);
    if (it == live_.end()) {  // a Kiln bug; free runs in destructors, so report instead of throwing
      fmt::print(stderr, "kiln: internal error: {} allocator: free of {} ({} B), which it did not hand out\n",
                 device_, block.ptr, block.size);
      return;
    }
    requested_in_use_ -= static_cast<int64_t>(it->second);
    live_.erase(it);
    stats_.in_use -= static_cast<int64_t>(block.size);
    stats_.cached += static_cast<int64_t>(block.size);
    free_[block.size].push_back(block.ptr);
  }

  storage::Stats stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

  AllocatorStats detailed() const {
    std::lock_guard lock(mu_);
    return detailed_locked();
  }

  void reset_peak() override {
    std::lock_guard lock(mu_);
    stats_.peak_in_use = stats_.in_use;
  }

  int64_t release_cached() override {
    std::lock_guard lock(mu_);
    DeviceScope scope(device_.id);
    return release_cached_locked();
  }

  void set_system_limit(int64_t bytes) override {
    std::lock_guard lock(mu_);
    system_limit_ = bytes;
  }

 private:
  AllocatorStats detailed_locked() const {
    AllocatorStats s;
    s.basic = stats_;
    s.requested_in_use = requested_in_use_;
    s.reserved = system_bytes_;
    return s;
  }

  void* system_alloc(size_t size) {
    if (system_limit_ >= 0 && system_bytes_ + static_cast<int64_t>(size) > system_limit_) return nullptr;
    void* p = nullptr;
    // While this thread captures a graph (graph_capture.cc), cudaMalloc is a
    // call the capture mode forbids: allow it for this call (the memory is
    // not part of the graph; the graph keeps the block).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    const bool capturing = capturing_on_this_thread();
    if (capturing) (void)cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t status = cudaMalloc(&p, size);
    if (capturing) (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it and let the caller retry or report
      return nullptr;
    }
    KILN_CUDA_CHECK(status, device_);  // anything else (no device, sticky error) is not an OOM
    system_bytes_ += static_cast<int64_t>(size);
    return p;
  }

  // cudaFree synchronizes the device: no kernel can still use a cached block.
  int64_t release_cached_locked() {
    int64_t released = 0;
    for (auto& [size, ptrs] : free_) {
      for (void* p : ptrs) KILN_CUDA_CHECK(cudaFree(p), device_);
      released += static_cast<int64_t>(size * ptrs.size());
    }
    system_bytes_ -= released;
    free_.clear();
    stats_.cached = 0;
    return released;
  }

  [[noreturn]] void throw_oom(size_t size, size_t rounded) {
    size_t free_bytes = 0, total_bytes = 0;
    std::string device_state = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess
                                   ? fmt::format("{} MiB free of {} MiB on the device", free_bytes >> 20,
                                                 total_bytes >> 20)
                                   : std::string("cudaMemGetInfo failed");
    (void)cudaGetLastError();
    throw OutOfMemory(fmt::format(
        "{}: out of device memory: cannot allocate {} bytes (rounded to {}) after freeing the cache; "
        "allocator: {}{}; {}",
        device_, size, rounded, detailed_locked().to_string(),
        system_limit_ >= 0 ? fmt::format(" (test limit {} B)", system_limit_) : std::string(), device_state));
  }

  const Device device_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> live_;  // block -> requested size
  storage::Stats stats_;
  int64_t requested_in_use_ = 0;
  int64_t system_bytes_ = 0;
  int64_t system_limit_ = -1;
};

}  // namespace

std::unique_ptr<storage::Pool> make_caching_allocator(Device device) {
  return std::make_unique<CachingAllocator>(device);
}

AllocatorStats allocator_stats(int device) {
  auto& pool = storage::pool(Device::cuda(device));
  return static_cast<const CachingAllocator&>(pool).detailed();
}

}  // namespace kiln::cuda
