// cpu::parallel_claim (backends/cpu/parallel_claim.h): every index runs
// exactly once for any length and thread count, call after call (helpers
// finishing late must not run a unit of the next loop), from two threads at
// once (one of them runs its loop alone), and with more threads than cores.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "backends/cpu/parallel_claim.h"

namespace kiln {
namespace {

// Runs parallel_claim over [0, n) and checks that each index ran once.
void expect_each_once(int threads, int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int64_t> bad{0};
  cpu::parallel_claim(threads, n, [&](int64_t b, int64_t e) {
    if (b < 0 || e > n || b >= e) bad.fetch_add(1);
    for (int64_t i = std::max<int64_t>(b, 0); i < std::min(e, n); ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  ASSERT_EQ(bad.load(), 0) << "threads=" << threads << " n=" << n << ": a range outside [0, n)";
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "threads=" << threads << " n=" << n << " index " << i;
}

TEST(ParallelClaim, EveryIndexOnceForAnyLengthAndThreads) {
  for (int threads : {1, 2, 3, 4, 8})
    for (int64_t n : {0, 1, 2, 3, 7, 32, 33, 1000}) expect_each_once(threads, n);
}

// Many short loops back to back: a helper still looking at loop g must not
// claim anything of loop g + 1 with g's function.
TEST(ParallelClaim, BackToBackLoopsDoNotMix) {
  for (int round = 0; round < 3000; ++round) expect_each_once(2 + round % 3, 1 + round % 40);
}

// More units than a part word holds: units of several indices.
TEST(ParallelClaim, LongRanges) { expect_each_once(2, (int64_t{1} << 20) + 12345); }

TEST(ParallelClaim, TwoCallersAtOnce) {
  std::atomic<int> failures{0};
  auto caller = [&] {
    for (int round = 0; round < 500; ++round) {
      const int64_t n = 1 + round % 64;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      cpu::parallel_claim(2, n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (auto& h : hits) failures += h.load() != 1;
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace kiln
