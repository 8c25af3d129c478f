// Rendezvous: parties on different threads leave with the same slot-ordered
// sum, rounds repeat, meet runs its act once per round, and a missing party
// gives every waiter one clear error.
#include <gtest/gtest.h>

#include "tests/test_util.h"

#include <thread>
#include <vector>

#include "ir/error.h"
#include "runtime/rendezvous.h"

namespace kiln {
namespace {

TEST(Rendezvous, EveryPartyGetsTheSumInEveryRound) {
  constexpr int kParties = 3, kRounds = 50;
  Rendezvous r(kParties, "test", 10);
  std::vector<std::vector<float>> got(kParties);
  std::vector<std::thread> threads;
  for (int p = 0; p < kParties; ++p) {
    threads.emplace_back([&, p] {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<float> part{static_cast<float>(p + 1), static_cast<float>(round)}, total(2);
        r.all_sum(p, Device::cpu(p), part, total);
        got[static_cast<size_t>(p)].insert(got[static_cast<size_t>(p)].end(), total.begin(), total.end());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int p = 0; p < kParties; ++p) {
    ASSERT_EQ(got[static_cast<size_t>(p)].size(), 2u * kRounds);
    for (int round = 0; round < kRounds; ++round) {
      EXPECT_EQ(got[static_cast<size_t>(p)][2 * round], 6.0f);
      EXPECT_EQ(got[static_cast<size_t>(p)][2 * round + 1], 3.0f * round);
    }
  }
}

TEST(Rendezvous, AMissingPartyBreaksItWithOneError) {
  Rendezvous r(2, "SyncBatchNorm 'bn' step 0 mean (forward)", 0.1);
  std::vector<float> part{1}, total(1);
  std::string msg = test::error_of<Error>([&] { r.all_sum(0, Device::cpu(0), part, total); });
  EXPECT_CONTAINS(msg, "SyncBatchNorm 'bn' step 0 mean (forward): cpu(0) waited 0.1 s");
  EXPECT_CONTAINS(msg, "1 of 2 arrived (cpu(0))");
  // The late party gets the same error at once instead of waiting again.
  EXPECT_EQ(test::error_of<Error>([&] { r.all_sum(1, Device::cpu(1), part, total); }), msg);
}

// meet: the last party runs the act once per round, after every party
// wrote its share and before any returns; the act's error reaches them all.
TEST(Rendezvous, MeetRunsTheActOnceWhenAllHaveArrived) {
  constexpr int kParties = 3, kRounds = 30;
  Rendezvous r(kParties, "meeting", 10);
  std::vector<int> shares(kParties, -1);
  std::vector<int> sums;  // one per round, written by the act
  std::vector<std::vector<int>> seen(kParties);
  std::vector<std::thread> threads;
  for (int p = 0; p < kParties; ++p) {
    threads.emplace_back([&, p] {
      for (int round = 0; round < kRounds; ++round) {
        shares[static_cast<size_t>(p)] = round * 10 + p;
        r.meet(p, Device::cpu(p), [&] { sums.push_back(shares[0] + shares[1] + shares[2]); });
        seen[static_cast<size_t>(p)].push_back(sums.back());
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(sums.size(), static_cast<size_t>(kRounds));
  for (int round = 0; round < kRounds; ++round) EXPECT_EQ(sums[static_cast<size_t>(round)], round * 30 + 3);
  for (int p = 0; p < kParties; ++p) EXPECT_EQ(seen[static_cast<size_t>(p)], sums);

  Rendezvous failing(2, "failing", 10);
  std::string other;
  std::thread t([&] {
    other =
        test::error_of<ValueError>([&] { failing.meet(1, Device::cpu(1), [] { throw ValueError("act failed"); }); });
  });
  std::string mine =
      test::error_of<ValueError>([&] { failing.meet(0, Device::cpu(0), [] { throw ValueError("act failed"); }); });
  t.join();
  EXPECT_EQ(mine, "act failed");
  EXPECT_EQ(other, "act failed");
  int runs = 0;  // still usable
  std::thread t2([&] { failing.meet(1, Device::cpu(1), [&] { ++runs; }); });
  failing.meet(0, Device::cpu(0), [&] { ++runs; });
  t2.join();
  EXPECT_EQ(runs, 1);
}

TEST(Rendezvous, MisuseIsReported) {
  EXPECT_THROW(Rendezvous(0, "m", 1), ValueError);
  Rendezvous r(2, "m", 10);
  std::vector<float> one{1}, out1(1);
  EXPECT_CONTAINS(test::error_of<ValueError>([&] { r.all_sum(2, Device::cpu(0), one, out1); }), "slot 2");
}

}  // namespace
}  // namespace kiln
