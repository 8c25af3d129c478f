#include "runtime/storage.h"

#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "ir/error.h"
#include "runtime/record_pool.h"

namespace kiln::storage {

std::string Stats::to_string() const {
  return fmt::format("in use {} B, cached {} B, peak {} B, {} allocs ({} from cache, {} from the system)", in_use,
                     cached, peak_in_use, num_allocs, num_cache_hits, num_system_allocs);
}

size_t round_size(size_t size) {
  constexpr size_t kAlign = 64;
  if (size <= 4096) return size == 0 ? kAlign : (size + kAlign - 1) / kAlign * kAlign;
  // Quarter steps between powers of two bound waste to 25%.
  size_t p = std::bit_floor(size - 1);
  size_t step = p / 4;
  return (size + step - 1) / step * step;
}

namespace {

// Sizes up to kSmallLimit (64-byte classes) keep their free blocks in an
// array indexed by class, larger ones in a map: the small arrays an eager
// loop allocates and frees once per op cost no tree search. A spin lock:
// the critical sections are a few dozen instructions.
class CpuPool final : public Pool {
  static constexpr size_t kSmallLimit = 4096;
  static constexpr size_t kSmallStep = 64;

 public:
  explicit CpuPool(Device device) : device_(device) {}
  ~CpuPool() override {
    // Pools live until exit; cached memory goes back with the process.
  }

  Block alloc(size_t size) override {
    size_t rounded = round_size(size);
    std::lock_guard lock(mu_);
    ++stats_.num_allocs;
    std::vector<void*>* list = free_list(rounded, false);
    void* p = nullptr;
    if (list != nullptr && !list->empty()) {
      p = list->back();
      list->pop_back();
      stats_.cached -= static_cast<int64_t>(rounded);
      ++stats_.num_cache_hits;
    } else {
      p = system_alloc(rounded);
      if (p == nullptr) {
        release_cached_locked();
        p = system_alloc(rounded);
      }
      if (p == nullptr) {
        throw OutOfMemory(fmt::format("{}: cannot allocate {} bytes (rounded to {}); pool: {}", device_, size,
                                      rounded, stats_.to_string()));
      }
      ++stats_.num_system_allocs;
    }
    stats_.in_use += static_cast<int64_t>(rounded);
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    return Block{p, rounded, device_};
  }

  void free(Block block) override {
    if (block.ptr == nullptr) return;
    std::lock_guard lock(mu_);
    stats_.in_use -= static_cast<int64_t>(block.size);
    stats_.cached += static_cast<int64_t>(block.size);
    free_list(block.size, true)->push_back(block.ptr);
  }

  Stats stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

  void reset_peak() override {
    std::lock_guard lock(mu_);
    stats_.peak_in_use = stats_.in_use;
  }

  int64_t release_cached() override {
    std::lock_guard lock(mu_);
    return release_cached_locked();
  }

  void set_system_limit(int64_t bytes) override {
    std::lock_guard lock(mu_);
    system_limit_ = bytes;
  }

 private:
  void* system_alloc(size_t size) {
    if (system_limit_ >= 0 && system_bytes_ + static_cast<int64_t>(size) > system_limit_) return nullptr;
    void* p = std::aligned_alloc(64, size);
    if (p) system_bytes_ += static_cast<int64_t>(size);
    return p;
  }

  // The free blocks of `rounded` bytes (null when none were ever cached and
  // `create` is false).
  std::vector<void*>* free_list(size_t rounded, bool create) {
    if (rounded <= kSmallLimit) return &small_free_[rounded / kSmallStep - 1];
    if (create) return &free_[rounded];
    auto it = free_.find(rounded);
    return it == free_.end() ? nullptr : &it->second;
  }

  int64_t release_cached_locked() {
    int64_t released = 0;
    auto release = [&](size_t size, std::vector<void*>& ptrs) {
      for (void* p : ptrs) std::free(p);
      released += static_cast<int64_t>(size * ptrs.size());
      system_bytes_ -= static_cast<int64_t>(size * ptrs.size());
      ptrs.clear();
    };
    for (size_t i = 0; i < small_free_.size(); ++i) release((i + 1) * kSmallStep, small_free_[i]);
    for (auto& [size, ptrs] : free_) release(size, ptrs);
    free_.clear();
    stats_.cached = 0;
    return released;
  }

  const Device device_;
  mutable SpinLock mu_;
  std::array<std::vector<void*>, kSmallLimit / kSmallStep> small_free_;
  std::map<size_t, std::vector<void*>> free_;
  Stats stats_;
  int64_t system_bytes_ = 0;
  int64_t system_limit_ = -1;
};

}  // namespace

std::unique_ptr<Pool> make_cuda_pool(Device device);  // backends/cuda, or throws DeviceError

Pool& pool(Device device) {
  static std::array<std::array<std::once_flag, kMaxDevicesPerKind>, kNumDeviceKinds> once;
  // Leaked: operations the engine finishes during exit() still allocate and free.
  using Pools = std::array<std::array<std::atomic<Pool*>, kMaxDevicesPerKind>, kNumDeviceKinds>;
  static Pools& pools = *new Pools{};
  // Fast path (every array allocation): a pool that exists was made for a
  // checked device.
  auto k = static_cast<size_t>(device.kind);
  auto i = static_cast<size_t>(device.id);
  if (k < kNumDeviceKinds && i < kMaxDevicesPerKind) {
    if (Pool* p = pools[k][i].load(std::memory_order_acquire)) return *p;
  }
  check_device(device);
  std::call_once(once[k][i], [&] {
    std::unique_ptr<Pool> p = device.is_cpu() ? std::make_unique<CpuPool>(device) : make_cuda_pool(device);
    pools[k][i].store(p.release(), std::memory_order_release);
  });
  return *pools[k][i].load(std::memory_order_acquire);
}

}  // namespace kiln::storage
