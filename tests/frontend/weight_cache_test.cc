// The weight cache (backends/cpu/weight_cache.h): hits while the weights'
// bytes are unchanged, misses and rebuilds after any change, several entries
// behind one address, the switches; then inference through it: a hybridized
// ResNet-style block (Winograd layers, a direct oneDNN layer, BatchNorm folded
// into the weights) must see every change of a weight or a running statistic
// between two predict calls, equal bit for bit the same call without the
// cache, and training must not use it.
#include <gtest/gtest.h>

#include "tests/test_util.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "backends/cpu/weight_cache.h"
#include "frontend/autograd.h"
#include "frontend/kiln.h"

namespace kiln {
namespace {

using test::expect_close;

// Clears the cache before and after a test, restoring its switches.
class CacheScope {
 public:
  CacheScope() : enabled_(cpu::weight_cache_enable(true)) { cpu::weight_cache_clear(); }
  ~CacheScope() {
    cpu::weight_cache_clear();
    cpu::weight_cache_enable(enabled_);
  }

 private:
  bool enabled_;
};

// A derived form that records how often it was made: out = 2 * w[0], w[last].
struct Doubler {
  const std::vector<float>& w;
  int makes = 0;
  std::shared_ptr<const cpu::DerivedWeights> find(const std::string& kind = "test|") {
    return cpu::weight_cache_find(kind, w.data(), w.size() * sizeof(float), 2 * sizeof(float), [&](void* out) {
      ++makes;
      auto* f = static_cast<float*>(out);
      f[0] = 2 * w.front();
      f[1] = w.back();
    });
  }
};

float first(const std::shared_ptr<const cpu::DerivedWeights>& d) { return static_cast<const float*>(d->data())[0]; }

TEST(WeightCache, HitsWhileTheBytesAreUnchangedAndRebuildsAfterAChange) {
  CacheScope scope;
  std::vector<float> w(1000, 1.0f);
  Doubler d{w};
  auto a = d.find();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(first(a), 2.0f);
  auto b = d.find();
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(d.makes, 1);
  w[999] = 5.0f;  // the last element only: the whole array is compared
  auto c = d.find();
  EXPECT_EQ(d.makes, 2);
  EXPECT_NE(c.get(), a.get());
  EXPECT_EQ(static_cast<const float*>(c->data())[1], 5.0f);
  EXPECT_EQ(static_cast<const float*>(a->data())[1], 1.0f);  // a held entry stays valid
  w[0] = -0.0f;  // a different bit pattern of an equal value still misses
  w[0] = 1.0f;
  d.find();
  EXPECT_EQ(d.makes, 2);
  auto other = d.find("other kind|");  // another kind of the same bytes is another entry
  EXPECT_EQ(d.makes, 3);
  cpu::WeightCacheStats stats = cpu::weight_cache_stats();
  EXPECT_EQ(stats.misses, 3);
  EXPECT_EQ(stats.hits, 2);
  EXPECT_GE(stats.bytes, static_cast<int64_t>(3 * w.size() * sizeof(float)));
}

TEST(WeightCache, SeveralWeightsAtOneAddressEachKeepAnEntry) {
  CacheScope scope;
  // An executor's memory plan reuses one address for several layers' folded weights.
  std::vector<float> w(64, 0.0f);
  Doubler d{w};
  for (int round = 0; round < 3; ++round) {
    for (float v : {1.0f, 2.0f, 3.0f}) {
      std::fill(w.begin(), w.end(), v);
      EXPECT_EQ(first(d.find()), 2 * v);
    }
  }
  EXPECT_EQ(d.makes, 3);
  EXPECT_EQ(cpu::weight_cache_stats().entries, 3);
  // A weight that keeps changing does not fill the cache: one address keeps a bounded number.
  for (int i = 0; i < 100; ++i) {
    w[0] = static_cast<float>(100 + i);
    d.find();
  }
  EXPECT_LE(cpu::weight_cache_stats().entries, 16);
}

TEST(WeightCache, EntriesNoLookupFindsLeaveWhileUsedOnesStay) {
  CacheScope scope;
  std::vector<float> used(64, 1.0f), stale(64, 2.0f), changing(64, 3.0f);
  Doubler u{used}, s{stale}, c{changing};
  u.find();
  s.find();
  for (int i = 0; i < 300; ++i) {  // a weight that changes every call, beside one that does not
    changing[0] = static_cast<float>(i);
    c.find();
    u.find();
  }
  EXPECT_EQ(u.makes, 1);
  EXPECT_LE(cpu::weight_cache_stats().entries, 17);  // `used` and at most 16 of `changing`
  s.find();
  EXPECT_EQ(s.makes, 2) << "the stale entry should have left";
}

TEST(WeightCache, DisabledOffOrTooSmallGivesNullAndTheLimitTrims) {
  CacheScope scope;
  std::vector<float> w(256, 1.0f);
  Doubler d{w};
  ASSERT_NE(d.find(), nullptr);
  cpu::weight_cache_enable(false);
  EXPECT_EQ(d.find(), nullptr);
  EXPECT_EQ(cpu::weight_cache_stats().entries, 1);  // kept while disabled
  cpu::weight_cache_enable(true);
  EXPECT_NE(d.find(), nullptr);
  EXPECT_EQ(d.makes, 1);
  const int64_t limit = cpu::weight_cache_set_limit(512);  // below one entry's copy (1 KiB)
  EXPECT_EQ(cpu::weight_cache_stats().entries, 0);
  EXPECT_EQ(d.find(), nullptr);
  cpu::weight_cache_set_limit(0);
  EXPECT_EQ(d.find(), nullptr);
  cpu::weight_cache_set_limit(limit);
  EXPECT_NE(d.find(), nullptr);
}

// Two residual-style stages: Winograd layers (3x3 stride 1, 32 channels, 8x8
// maps), a direct oneDNN layer (3x3 stride 2) and BatchNorm after each
// convolution (folded into its weight in predict mode).
nn::HybridSequential make_net() {
  nn::HybridSequential net;
  net.add(nn::Conv2D(32, 3, 1, 1, 1, 1, "", true, 16), nn::BatchNorm(), nn::Activation("relu"),
          nn::Conv2D(32, 3, 1, 1), nn::BatchNorm(), nn::Activation("relu"), nn::Conv2D(48, 3, 2, 1),
          nn::BatchNorm(), nn::Activation("relu"), nn::Conv2D(48, 3, 1, 1));
  net.initialize(init::Xavier());
  return net;
}

// The output of `net` on `x` with the weight cache off (the per-call path).
NDArray uncached(nn::HybridSequential& net, const NDArray& x) {
  cpu::weight_cache_enable(false);
  NDArray y = net(x);
  y.wait_to_read();
  cpu::weight_cache_enable(true);
  return y;
}

double max_difference(const NDArray& a, const NDArray& b) {
  auto u = a.to_vector<float>(), v = b.to_vector<float>();
  double m = 0;
  for (size_t i = 0; i < u.size(); ++i) m = std::max(m, static_cast<double>(std::abs(u[i] - v[i])));
  return m;
}

TEST(WeightCache, HybridizedInferenceSeesEveryChangeBetweenCalls) {
  CacheScope scope;
  nd::random::seed(11);
  nn::HybridSequential net = make_net();
  NDArray x = nd::random::uniform({4, 16, 8, 8}, -1, 1);
  net.hybridize();
  NDArray y0 = net(x);
  y0.wait_to_read();
  const cpu::WeightCacheStats first = cpu::weight_cache_stats();
  EXPECT_GT(first.misses, 0);  // the Winograd layers and the direct layer's reorder
  expect_close(net(x), y0, 0, "second call, from the cache");
  EXPECT_GT(cpu::weight_cache_stats().hits, first.hits);
  expect_close(y0, uncached(net, x), 0, "cached against uncached");

  // Each change must reach the output, and agree with the uncached call.
  auto& conv0 = dynamic_cast<nn::Conv2D&>(net[0]);
  auto& conv_strided = dynamic_cast<nn::Conv2D&>(net[6]);
  auto& bn1 = dynamic_cast<nn::BatchNorm&>(net[4]);
  struct Change {
    const char* what;
    std::function<void()> apply;
  };
  const Change changes[] = {
      {"a Winograd layer's weight, in place", [&] { conv0.weight().data() *= 1.5; }},
      {"the strided (direct) layer's weight, replaced",
       [&] { conv_strided.weight().set_data(nd::random::uniform(conv_strided.weight().data().shape(), -0.1, 0.1)); }},
      {"a folded BatchNorm's running mean", [&] { bn1.running_mean().data() += 0.25; }},
      {"one element of the last layer's weight", [&] {
         NDArray w = dynamic_cast<nn::Conv2D&>(net[9]).weight().data();
         std::vector<float> delta(static_cast<size_t>(w.shape().size()), 0.0f);
         delta[delta.size() / 2] = 1.0f;
         w += nd::array(delta, w.shape());
       }}};
  NDArray before = y0;
  for (const Change& c : changes) {
    c.apply();
    NDArray after = net(x);
    EXPECT_GT(max_difference(after, before), 1e-3) << c.what << ": the output did not change";
    expect_close(after, uncached(net, x), 0, std::string(c.what) + ": cached against uncached");
    expect_close(net(x), after, 0, std::string(c.what) + ": the next call");
    before = after;
  }
  // And the imperative model, which folds nothing, agrees within Winograd's rounding.
  net.hybridize(false);
  expect_close(before, uncached(net, x), 1e-4, "hybridized against imperative");
}

// Hybridized calls from several threads at once (issue 4: calls from several
// threads on one hybridized model are safe) share the cache: racing misses,
// hits on entries another thread made. Every thread's output must equal the
// uncached call bit for bit.
TEST(WeightCache, ConcurrentHybridizedCallsShareItAndAgree) {
  CacheScope scope;
  nd::random::seed(12);
  nn::HybridSequential net = make_net();
  NDArray x = nd::random::uniform({4, 16, 8, 8}, -1, 1);
  net.hybridize();
  const std::vector<float> want = uncached(net, x).to_vector<float>();
  cpu::weight_cache_clear();
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> got(4);
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      NDArray y;
      for (int i = 0; i < 10; ++i) y = net(x);
      got[t] = y.to_vector<float>();
    });
  }
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < got.size(); ++t) EXPECT_EQ(got[t], want) << "thread " << t;
  EXPECT_GT(cpu::weight_cache_stats().hits, 0);
}

TEST(WeightCache, TrainingDoesNotUseIt) {
  CacheScope scope;
  nd::random::seed(12);
  nn::HybridSequential net = make_net();
  NDArray x = nd::random::uniform({4, 16, 8, 8}, -1, 1);
  for (bool hybridize : {false, true}) {
    net.hybridize(hybridize);
    NDArray y;
    {
      autograd::Record record;
      y = net(x);
    }
    y.wait_to_read();
    cpu::WeightCacheStats stats = cpu::weight_cache_stats();
    EXPECT_EQ(stats.hits + stats.misses, 0) << (hybridize ? "hybridized" : "imperative");
  }
}

}  // namespace
}  // namespace kiln
