// Small building blocks for hot paths that allocate a record per operation:
// a spin lock for critical sections of a few dozen instructions, and a pool
// that recycles fixed-type records through per-thread caches (the engine's
// Var and Op records; invoke's kernel calls).
//
//   struct Rec { Rec* pool_next = nullptr; void reset(); ... };
//   Rec* r = RecordPool<Rec>::alloc();   // any thread
//   RecordPool<Rec>::free(r);            // any thread (often another one)
#pragma once

#include <atomic>
#include <cstddef>
#include <new>
#include <mutex>
#include <thread>

namespace kiln {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Test-and-test-and-set lock for critical sections of a few dozen
// instructions. Yields after a short spin so a preempted holder can finish
// (the machine may have fewer cores than runnable threads).
class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire)) {
      for (int spins = 0; flag_.load(std::memory_order_relaxed); ++spins) {
        if (spins < 64) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// Recycles records of type T (which has a `T* pool_next` member and a
// `reset()`): each thread keeps a small cache; caches exchange batches with a
// global list under a lock, so alloc/free take no lock in the common case.
// Records are never destroyed (the pool is leaked on purpose so worker threads
// may still use it during process exit). Under AddressSanitizer or
// ThreadSanitizer records are plain new/delete, so a use after delete_var is
// reported.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kPoolRecords = false;
#else
inline constexpr bool kPoolRecords = true;
#endif

template <typename T>
class RecordPool {
  static constexpr int kBatch = 32;

 public:
  static T* alloc() {
    if constexpr (!kPoolRecords) return new T();
    Cache& c = cache_;
    if (!c.head) c.refill();
    if (!c.head) return new T();
    T* t = c.head;
    c.head = t->pool_next;
    --c.count;
    t->pool_next = nullptr;
    return t;
  }

  static void free(T* t) {
    if constexpr (!kPoolRecords) {
      delete t;
      return;
    }
    t->reset();
    Cache& c = cache_;
    t->pool_next = c.head;
    c.head = t;
    if (++c.count > 2 * kBatch) c.spill(kBatch);
  }

 private:
  struct Global {
    SpinLock lock;
    T* head = nullptr;
  };
  static Global& global() {
    static Global* g = new Global;
    return *g;
  }

  struct Cache {
    T* head = nullptr;
    int count = 0;

    void refill() {
      Global& g = global();
      std::lock_guard<SpinLock> guard(g.lock);
      for (int i = 0; i < kBatch && g.head; ++i) {
        T* t = g.head;
        g.head = t->pool_next;
        t->pool_next = head;
        head = t;
        ++count;
      }
    }
    // Moves `n` records (all when n < 0) to the global list.
    void spill(int n) {
      if (!head) return;
      T* first = head;
      T* last = head;
      int moved = 1;
      while (last->pool_next && (n < 0 || moved < n)) {
        last = last->pool_next;
        ++moved;
      }
      head = last->pool_next;
      count -= moved;
      Global& g = global();
      std::lock_guard<SpinLock> guard(g.lock);
      last->pool_next = g.head;
      g.head = first;
    }
    ~Cache() { spill(-1); }
  };
  static inline thread_local Cache cache_;
};

// Recycles raw blocks of `Size` bytes the same way (for allocate_shared:
// an NDArray's chunk and its control block are one block per array).
template <size_t Size>
class BlockPool {
  union Block {
    Block* pool_next;
    alignas(std::max_align_t) unsigned char bytes[Size];
    void reset() {}
  };

 public:
  static void* alloc() {
    if constexpr (!kPoolRecords) return ::operator new(sizeof(Block));
    return RecordPool<Block>::alloc();
  }
  static void free(void* p) {
    if constexpr (!kPoolRecords) {
      ::operator delete(p);
      return;
    }
    RecordPool<Block>::free(static_cast<Block*>(p));
  }
};

// A std allocator over BlockPool, for std::allocate_shared<T>(PoolAllocator<T>(), ...).
template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: rebinding, as std allocators do
  T* allocate(size_t n) {
    if (n != 1) return static_cast<T*>(::operator new(n * sizeof(T)));
    return static_cast<T*>(BlockPool<sizeof(T)>::alloc());
  }
  void deallocate(T* p, size_t n) {
    if (n != 1) {
      ::operator delete(p);
      return;
    }
    BlockPool<sizeof(T)>::free(p);
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const { return true; }
};

}  // namespace kiln
