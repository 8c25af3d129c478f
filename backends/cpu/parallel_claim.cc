#include "backends/cpu/parallel_claim.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::cpu::detail {
namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// A part's state is one word, so a claim is one compare-and-swap that also
// checks the loop it belongs to: generation (24 bits) | next unit (20) | end
// (20). A helper that wakes up late sees another generation and claims
// nothing; a part left from an earlier loop is used up (next == end: a loop
// returns only when all its units ran), so even a generation that wrapped
// around finds nothing to claim there.
constexpr int kIndexBits = 20;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
constexpr int64_t kMaxUnits = static_cast<int64_t>(kIndexMask);
constexpr uint32_t kGenMask = (uint32_t{1} << 24) - 1;
constexpr int kMaxParticipants = 64;

constexpr uint64_t pack(uint32_t gen, int64_t next, int64_t end) {
  return uint64_t{gen} << (2 * kIndexBits) | static_cast<uint64_t>(next) << kIndexBits | static_cast<uint64_t>(end);
}

// How long an idle helper spins (then yields, then sleeps) before the next
// loop: calls that follow each other within microseconds find it awake.
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr auto kYield = std::chrono::microseconds(200);

struct alignas(64) Part {
  std::atomic<uint64_t> word{0};
};

class ClaimPool {
 public:
  static ClaimPool& get() {
    static ClaimPool& pool = *new ClaimPool;  // leaked: its helpers run until exit
    return pool;
  }

  // False when another thread's loop is running.
  bool try_run(int num_threads, int64_t n, ClaimFn fn, const void* ctx) {
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    const int64_t unit = (n + kMaxUnits - 1) / kMaxUnits;
    const int64_t units = (n + unit - 1) / unit;
    const int participants = static_cast<int>(std::min<int64_t>({num_threads, kMaxParticipants, units}));
    while (num_helpers_ < participants - 1) {
      ++num_helpers_;
      std::thread([this, self = num_helpers_] { helper_main(self); }).detach();
    }
    gen_seq_ = (gen_seq_ + 1) & kGenMask;
    if (gen_seq_ == 0) gen_seq_ = 1;
    const uint32_t gen = gen_seq_;
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    unit_.store(unit, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    participants_.store(participants, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    for (int p = 0; p < participants; ++p)
      parts_[p].word.store(pack(gen, units * p / participants, units * (p + 1) / participants),
                           std::memory_order_relaxed);
    gen_.store(gen, std::memory_order_seq_cst);  // publishes the loop
    if (sleepers_.load(std::memory_order_seq_cst) > 0) gen_.notify_all();

    work(0, gen, participants, fn, ctx, unit, n);
    // Only units that a helper has claimed remain: wait for them.
    for (int spins = 0; done_.load(std::memory_order_acquire) < units; ++spins) {
      if (spins < 256) cpu_relax();
      else sched_yield();  // the helper may share this core
    }
    return true;
  }

 private:
  // Claims the next unit of part p of loop `gen`, or returns -1.
  int64_t claim(int p, uint32_t gen) {
    uint64_t w = parts_[p].word.load(std::memory_order_relaxed);
    for (;;) {
      if ((w >> (2 * kIndexBits)) != gen) return -1;
      const int64_t next = static_cast<int64_t>((w >> kIndexBits) & kIndexMask);
      if (next >= static_cast<int64_t>(w & kIndexMask)) return -1;
      if (parts_[p].word.compare_exchange_weak(w, w + (uint64_t{1} << kIndexBits), std::memory_order_acq_rel,
                                               std::memory_order_relaxed))
        return next;
    }
  }

  // Participant `self` runs units of its own part, then of the others.
  void work(int self, uint32_t gen, int participants, ClaimFn fn, const void* ctx, int64_t unit, int64_t n) {
    for (int i = 0; i < participants; ++i) {
      const int p = (self + i) % participants;
      for (int64_t u; (u = claim(p, gen)) >= 0;) {
        fn(ctx, u * unit, std::min(n, (u + 1) * unit));
        done_.fetch_add(1, std::memory_order_release);
      }
    }
  }

  // The loop's fields are read after a claim of its generation succeeded:
  // until that unit is done the loop cannot finish, so they are still its own.
  void work_as_helper(int self, uint32_t gen) {
    const int participants = participants_.load(std::memory_order_relaxed);
    if (self >= participants) return;
    for (int i = 0; i < participants; ++i) {
      const int p = (self + i) % participants;
      for (int64_t u; (u = claim(p, gen)) >= 0;) {
        const int64_t unit = unit_.load(std::memory_order_relaxed), n = n_.load(std::memory_order_relaxed);
        fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), u * unit, std::min(n, (u + 1) * unit));
        done_.fetch_add(1, std::memory_order_release);
      }
    }
  }

  [[noreturn]] void helper_main(int self) {
    using Clock = std::chrono::steady_clock;
    uint32_t seen = 0;
    for (;;) {
      uint32_t gen = gen_.load(std::memory_order_acquire);
      if (gen == seen) {
        const auto start = Clock::now();
        for (int spins = 1; (gen = gen_.load(std::memory_order_acquire)) == seen; ++spins) {
          if (spins % 64 != 0) {
            cpu_relax();
            continue;
          }
          const auto idle = Clock::now() - start;
          if (idle < kSpin) continue;
          if (idle < kYield) {
            sched_yield();
            continue;
          }
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          gen_.wait(seen, std::memory_order_seq_cst);
          sleepers_.fetch_sub(1, std::memory_order_relaxed);
          spins = 0;
        }
      }
      seen = gen;
      work_as_helper(self, gen);
    }
  }

  std::mutex mutex_;  // held by the loop's caller
  int num_helpers_ = 0;
  uint32_t gen_seq_ = 0;
  // The current loop, written by its caller before gen_ publishes it.
  std::atomic<ClaimFn> fn_{nullptr};
  std::atomic<const void*> ctx_{nullptr};
  std::atomic<int64_t> unit_{1}, n_{0};
  std::atomic<int> participants_{0};
  Part parts_[kMaxParticipants];
  alignas(64) std::atomic<int64_t> done_{0};  // units of the current loop that have run
  alignas(64) std::atomic<uint32_t> gen_{0};
  std::atomic<int> sleepers_{0};
};

}  // namespace

void parallel_claim(int num_threads, int64_t n, ClaimFn fn, const void* ctx) {
  if (!ClaimPool::get().try_run(num_threads, n, fn, ctx)) fn(ctx, 0, n);
}

}  // namespace kiln::cpu::detail
