// The CPU's random samples against straightforward references: the
// counter-based stream (a hash of seed and position) and Box–Muller on pairs
// (to a few ulp: the kernel may contract multiply-adds into FMAs), and bit
// for bit the same however the kernel splits the work between threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/ops/init.h"
#include "runtime/engine.h"

namespace kiln {
namespace {

// The reference stream, written out once more from its definition
// (backends/counter_rng.h) on purpose: it pins the values, so a change to the
// stream (which would change every seeded model) fails here.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}
double uniform_at(uint64_t seed, uint64_t pos) {
  return static_cast<double>(mix(seed ^ mix(pos + 0x9e3779b97f4a7c15ull)) >> 11) * 0x1.0p-53;
}
double normal_at(uint64_t seed, uint64_t pos, double loc, double scale) {
  const uint64_t pair = pos / 2;
  const double r = std::sqrt(-2.0 * std::log(1.0 - uniform_at(seed, 2 * pair)));
  const double theta = 2.0 * std::numbers::pi * uniform_at(seed, 2 * pair + 1);
  return loc + scale * r * ((pos & 1) ? std::sin(theta) : std::cos(theta));
}

NDArray draw(OpId op, int64_t n, int64_t seed, int64_t offset, double a, double b, DType dtype) {
  RandomAttrs attrs{.a = a, .b = b, .shape = Shape{n}, .dtype = dtype, .seed = seed, .offset = offset};
  return invoke1(op, {}, OpAttrs::make(attrs), {.device = Device::cpu(0)});
}

class RandomThreads : public testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    saved_ = engine::get().cpu_threads(Device::cpu(0));
    engine::get().set_cpu_threads(Device::cpu(0), GetParam());
  }
  void TearDown() override {
    engine::wait_all();
    engine::get().set_cpu_threads(Device::cpu(0), saved_);
  }
  int saved_ = 1;
};

TEST_P(RandomThreads, NormalIsBoxMullerOnPairsOfTheStream) {
  // Odd sizes and offsets put pair boundaries at chunk edges.
  for (int64_t n : {1, 2, 3, 17, 1001, 100003}) {
    for (int64_t offset : {0, 6, 7}) {
      const uint64_t seed = 1234 + static_cast<uint64_t>(n);
      std::vector<double> got = draw(OpId::kRandomNormal, n, static_cast<int64_t>(seed), offset, 0.5, 2.0,
                                     DType::kFloat64).to_vector<double>();
      for (int64_t i = 0; i < n; ++i) {
        const double want = normal_at(seed, static_cast<uint64_t>(offset + i), 0.5, 2.0);
        ASSERT_NEAR(got[static_cast<size_t>(i)], want, 1e-14 * (1 + std::abs(want)))
            << "n=" << n << " offset=" << offset << " i=" << i;
      }
      std::vector<float> f = draw(OpId::kRandomNormal, n, static_cast<int64_t>(seed), offset, 0.5, 2.0,
                                  DType::kFloat32).to_vector<float>();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(f[static_cast<size_t>(i)], static_cast<float>(got[static_cast<size_t>(i)])) << "float32 i=" << i;
    }
  }
}

TEST_P(RandomThreads, UniformIsTheStreamScaled) {
  const int64_t n = 10007;
  std::vector<double> got = draw(OpId::kRandomUniform, n, 99, 3, -1.0, 3.0, DType::kFloat64).to_vector<double>();
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(got[static_cast<size_t>(i)], -1.0 + 4.0 * uniform_at(99, static_cast<uint64_t>(3 + i))) << i;
}

TEST(Random, NormalDoesNotDependOnTheThreadCount) {
  const int saved = engine::get().cpu_threads(Device::cpu(0));
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3, 5}) {
    engine::get().set_cpu_threads(Device::cpu(0), threads);
    runs.push_back(draw(OpId::kRandomNormal, 100001, 5, 2, 0, 1, DType::kFloat32).to_vector<float>());
  }
  engine::get().set_cpu_threads(Device::cpu(0), saved);
  for (size_t k = 1; k < runs.size(); ++k) EXPECT_EQ(runs[k], runs[0]) << "run " << k;
}

INSTANTIATE_TEST_SUITE_P(Threads, RandomThreads, testing::Values(1, 2, 3));

}  // namespace
}  // namespace kiln
