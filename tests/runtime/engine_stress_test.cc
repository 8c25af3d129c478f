// Random dependency graphs on many devices, checked against sequential
// execution, for both engines. Each variable holds an int64; each op reads a
// few variables and read-modify-writes one or two, so any ordering mistake
// changes the final values (and ThreadSanitizer sees the unordered access).
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

namespace kiln::engine {
namespace {

#ifdef KILN_TSAN_BUILD
constexpr int kNumOps = 20000;
#else
constexpr int kNumOps = 100000;
#endif
constexpr int kNumVars = 1000;
constexpr int kNumDevices = 4;

struct OpSpec {
  int reads[3];
  int num_reads;
  int writes[2];
  int num_writes;
  int device;
  Lane lane;
  int priority;
};

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// The op's function: a hash of its index and the values it reads, folded into
// the values it writes.
void apply(const OpSpec& op, int index, int64_t* values) {
  uint64_t h = mix(static_cast<uint64_t>(index) + 1);
  for (int r = 0; r < op.num_reads; ++r) h = mix(h ^ static_cast<uint64_t>(values[op.reads[r]]));
  for (int w = 0; w < op.num_writes; ++w) {
    int64_t& v = values[op.writes[w]];
    v = static_cast<int64_t>(mix(h + static_cast<uint64_t>(v) * 31 + static_cast<uint64_t>(w)));
  }
}

std::vector<OpSpec> random_ops(int n, uint64_t seed) {
  std::vector<OpSpec> ops(n);
  uint64_t s = seed;
  auto next = [&](int bound) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((s >> 33) % static_cast<uint64_t>(bound));
  };
  for (OpSpec& op : ops) {
    op.num_reads = next(4);
    for (int r = 0; r < op.num_reads; ++r) op.reads[r] = next(kNumVars);
    op.num_writes = 1 + next(2);
    for (int w = 0; w < op.num_writes; ++w) op.writes[w] = next(kNumVars);
    if (op.num_writes == 2 && op.writes[1] == op.writes[0]) op.num_writes = 1;
    op.device = next(kNumDevices);
    op.lane = next(8) == 0 ? Lane::kCopy : Lane::kCompute;
    op.priority = next(16) == 0 ? next(5) - 2 : 0;
  }
  return ops;
}

std::string kind_name(const testing::TestParamInfo<Kind>& info) {
  return info.param == Kind::kNaive ? "naive" : "threaded";
}

class EngineStressTest : public testing::TestWithParam<Kind> {};
INSTANTIATE_TEST_SUITE_P(Kinds, EngineStressTest, testing::Values(Kind::kThreaded, Kind::kNaive), kind_name);

TEST_P(EngineStressTest, RandomGraphMatchesSequentialExecution) {
  std::vector<OpSpec> ops = random_ops(kNumOps, 2024);
  std::vector<int64_t> expected(kNumVars), actual(kNumVars);
  for (int i = 0; i < kNumVars; ++i) expected[i] = actual[i] = i;
  for (int i = 0; i < kNumOps; ++i) apply(ops[i], i, expected.data());

  auto engine = create(GetParam());
  std::vector<Var*> vars(kNumVars);
  for (Var*& v : vars) v = engine->new_var();
  int64_t* values = actual.data();
  for (int i = 0; i < kNumOps; ++i) {
    const OpSpec& op = ops[i];
    Var* reads[3];
    Var* writes[2];
    for (int r = 0; r < op.num_reads; ++r) reads[r] = vars[op.reads[r]];
    for (int w = 0; w < op.num_writes; ++w) writes[w] = vars[op.writes[w]];
    engine->push([&op, i, values](RunContext) { apply(op, i, values); },
                 std::span<Var* const>(reads, op.num_reads), std::span<Var* const>(writes, op.num_writes),
                 {.device = Device::cpu(op.device), .lane = op.lane, .priority = op.priority, .name = "stress"});
    if (i % 10007 == 0) {  // a wait in the middle sees a prefix's value
      int probe = op.writes[0];
      engine->wait_for_var(vars[probe]);
      std::vector<int64_t> prefix(kNumVars);
      for (int j = 0; j < kNumVars; ++j) prefix[j] = j;
      for (int j = 0; j <= i; ++j) apply(ops[j], j, prefix.data());
      EXPECT_EQ(values[probe], prefix[probe]) << "after op " << i;
    }
  }
  engine->wait_all();
  EXPECT_EQ(engine->num_pending(), 0);
  for (int i = 0; i < kNumVars; ++i) ASSERT_EQ(actual[i], expected[i]) << "var " << i;
  for (Var* v : vars) engine->delete_var(v);
}

// Variables created and deleted while their ops are pending, as NDArray
// temporaries are: every op still sees a consistent value.
TEST_P(EngineStressTest, ShortLivedVarsDeletedWhilePending) {
  auto engine = create(GetParam());
  constexpr int kSteps = kNumOps / 10;
  Var* acc = engine->new_var();
  int64_t total = 0;
  auto temps = std::make_unique<int64_t[]>(kSteps);
  for (int i = 0; i < kSteps; ++i) {
    Var* t = engine->new_var();
    int64_t* slot = &temps[i];
    engine->push([slot, i](RunContext) { *slot = i; }, {}, {t}, {.device = Device::cpu(i % kNumDevices)});
    engine->push([slot, &total](RunContext) { total += *slot; }, {t}, {acc},
                 {.device = Device::cpu((i + 1) % kNumDevices)});
    engine->delete_var(t);
  }
  engine->wait_for_var(acc);
  EXPECT_EQ(total, int64_t{kSteps} * (kSteps - 1) / 2);
  engine->delete_var(acc);
}

// The dispatch cost the frontend pays: independent tiny ops on one device,
// pushed without waiting. Prints the number; the bound only catches disasters.
TEST(EnginePerf, TinyIndependentOpsPushCost) {
  auto engine = create(Kind::kThreaded);
  constexpr int kOps = 1000;
  double x[2] = {1, 2};
  std::vector<Var*> ys(kOps);
  auto out = std::make_unique<double[]>(2 * kOps);
  Var* xv = engine->new_var();
  double best = 1e30;
  for (int rep = 0; rep < 20; ++rep) {
    for (Var*& y : ys) y = engine->new_var();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kOps; ++i) {
      double* o = &out[2 * i];
      engine->push(
          [&x, o](RunContext) {
            o[0] = x[0] + 1;
            o[1] = x[1] + 1;
          },
          {xv}, {ys[i]}, {.name = "add_scalar"});
    }
    engine->wait_all();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kOps;
    best = std::min(best, us);
    for (Var* y : ys) engine->delete_var(y);
  }
  engine->delete_var(xv);
  std::printf("[ perf ] push + run of a tiny independent op: %.3f us (best of 20 x %d)\n", best, kOps);
  EXPECT_EQ(out[2 * kOps - 1], 3.0);
  EXPECT_LT(best, 50.0);
}

}  // namespace
}  // namespace kiln::engine
