#include "runtime/storage.h"

#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "ir/error.h"
#include "runtime/device_backend.h"
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
// the critical sections are a few dozen instructions (system allocations and
// frees happen outside it).
class CpuPool final : public Pool {
  static constexpr size_t kSmallLimit = 4096;
  static constexpr size_t kSmallStep = 64;

 public:
  explicit CpuPool(Device device) : device_(device) {}
  ~CpuPool() override {
    // The process-wide pools live until exit; a pool destroyed before (one a
    // backend made for its caller) returns its cached blocks to the system.
    std::unique_lock lock(mu_);
    release_blocks(take_cached_locked(), lock);
  }

  Block alloc(size_t size) override {
    size_t rounded = round_size(size);
    std::unique_lock lock(mu_);
    ++stats_.num_allocs;
    std::vector<void*>* list = free_list(rounded, false);
    if ((list == nullptr || list->empty()) && rounded > kSmallLimit) {
      auto larger = larger_cached(rounded);
      if (larger != free_.large.end()) {
        list = &larger->second;
        rounded = larger->first;  // the block keeps its class, and returns to it
      }
    }
    void* p = nullptr;
    if (list != nullptr && !list->empty()) {
      p = list->back();
      list->pop_back();
      stats_.cached -= static_cast<int64_t>(rounded);
      ++stats_.num_cache_hits;
    } else {
      p = system_alloc(rounded, lock);
      if (p == nullptr) {
        release_blocks(take_cached_locked(), lock);
        p = system_alloc(rounded, lock);
      }
      if (p == nullptr) {
        Stats stats = stats_;
        lock.unlock();
        throw OutOfMemory(fmt::format("{}: cannot allocate {} bytes (rounded to {}); pool: {}", device_, size,
                                      rounded, stats.to_string()));
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
    std::unique_lock lock(mu_);
    int64_t released = stats_.cached;
    release_blocks(take_cached_locked(), lock);
    return released;
  }

  void set_system_limit(int64_t bytes) override {
    std::lock_guard lock(mu_);
    system_limit_ = bytes;
  }

 private:
  // Allocates `size` bytes from the system, counted against the test limit.
  // Called with mu_ held, which it releases meanwhile (the system call may
  // take far longer than the spin lock's other critical sections); the bytes
  // are counted first, so concurrent allocations respect the limit.
  void* system_alloc(size_t size, std::unique_lock<SpinLock>& lock) {
    if (system_limit_ >= 0 && system_bytes_ + static_cast<int64_t>(size) > system_limit_) return nullptr;
    system_bytes_ += static_cast<int64_t>(size);
    lock.unlock();
    void* p = std::aligned_alloc(64, size);
    lock.lock();
    if (p == nullptr) system_bytes_ -= static_cast<int64_t>(size);
    return p;
  }

  // The free blocks of `rounded` bytes (null when none were ever cached and
  // `create` is false).
  std::vector<void*>* free_list(size_t rounded, bool create) {
    if (rounded <= kSmallLimit) return &free_.small[rounded / kSmallStep - 1];
    if (create) return &free_.large[rounded];
    auto it = free_.large.find(rounded);
    return it == free_.large.end() ? nullptr : &it->second;
  }

  // A cached block of a larger class, at most kMaxBorrow times `rounded`
  // (the smallest such): a miss takes it rather than growing the pool, so
  // blocks cached for one size serve near sizes too. free_.large.end() when
  // there is none.
  static constexpr size_t kMaxBorrow = 2;
  std::map<size_t, std::vector<void*>>::iterator larger_cached(size_t rounded) {
    for (auto it = free_.large.upper_bound(rounded); it != free_.large.end() && it->first <= kMaxBorrow * rounded;
         ++it) {
      if (!it->second.empty()) return it;
    }
    return free_.large.end();
  }

  // The free blocks by size class.
  struct FreeLists {
    std::array<std::vector<void*>, kSmallLimit / kSmallStep> small;  // class i holds (i + 1) * kSmallStep bytes
    std::map<size_t, std::vector<void*>> large;
  };

  // Empties the cache (mu_ held; allocates nothing): returns its blocks, no
  // longer counted.
  FreeLists take_cached_locked() {
    FreeLists taken;
    std::swap(taken, free_);
    system_bytes_ -= stats_.cached;
    stats_.cached = 0;
    return taken;
  }

  // Gives `blocks` back to the system with mu_ released meanwhile.
  static void release_blocks(const FreeLists& blocks, std::unique_lock<SpinLock>& lock) {
    lock.unlock();
    for (const std::vector<void*>& ptrs : blocks.small)
      for (void* p : ptrs) std::free(p);
    for (const auto& [size, ptrs] : blocks.large)
      for (void* p : ptrs) std::free(p);
    lock.lock();
  }

  const Device device_;
  mutable SpinLock mu_;
  FreeLists free_;
  Stats stats_;
  int64_t system_bytes_ = 0;
  int64_t system_limit_ = -1;
};

}  // namespace

std::unique_ptr<Pool> make_host_pool(Device device) { return std::make_unique<CpuPool>(device); }

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
    std::unique_ptr<Pool> p = device_backend(device.kind).make_pool(device);
    pools[k][i].store(p.release(), std::memory_order_release);
  });
  return *pools[k][i].load(std::memory_order_acquire);
}

}  // namespace kiln::storage
