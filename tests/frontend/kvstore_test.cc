// kv::KVStore: local and device types over several CPU devices: sums over
// many keys, shapes, dtypes and priorities; push/pull/pushpull/broadcast and
// push_batch; errors for unknown keys, mismatched shapes and dtypes; the nccl
// type's refusal without a GPU and its bucketing plan.
#include <gtest/gtest.h>

#include "tests/test_util.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "frontend/kvstore.h"
#include "frontend/nd.h"

namespace kiln {
namespace {

using test::error_of;

class KVStoreTypes : public ::testing::TestWithParam<std::string> {};

// Value of element i on device d: distinct per device so a missing or doubled
// term shows.
double value_at(int d, int64_t i) { return (d + 1) * 10.0 + static_cast<double>(i % 7); }

std::vector<double> expected_sum(int devices, int64_t n) {
  std::vector<double> s(static_cast<size_t>(n), 0.0);
  for (int d = 0; d < devices; ++d) {
    for (int64_t i = 0; i < n; ++i) s[static_cast<size_t>(i)] += value_at(d, i);
  }
  return s;
}

NDArray filled(const Shape& shape, DType dtype, int d) {
  std::vector<double> v(static_cast<size_t>(shape.size()));
  for (int64_t i = 0; i < shape.size(); ++i) v[static_cast<size_t>(i)] = value_at(d, i);
  return nd::array(v, shape, Device::cpu(d)).astype(dtype);
}

TEST_P(KVStoreTypes, PushPullSumsManyKeysShapesDtypesAndPriorities) {
  auto kv = kv::KVStore::create(GetParam());
  EXPECT_EQ(kv->type(), GetParam());
  const std::vector<Shape> shapes = {{1}, {3}, {4, 5}, {2, 3, 4}, {1000}, {17, 33}};
  const std::vector<DType> dtypes = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64};
  for (int devices : {1, 2, 3, 4}) {
    std::vector<std::vector<NDArray>> all;
    std::vector<std::string> keys;
    int k = 0;
    for (const Shape& shape : shapes) {
      for (DType dtype : dtypes) {
        std::string key = fmt::format("d{}_k{}", devices, k);
        std::vector<NDArray> values;
        for (int d = 0; d < devices; ++d) values.push_back(filled(shape, dtype, d));
        kv->init(key, values[0]);
        kv->pushpull(key, values, values, /*priority=*/k % 5 - 2);  // in place
        all.push_back(values);
        keys.push_back(key);
        ++k;
      }
    }
    for (size_t j = 0; j < all.size(); ++j) {
      auto want = expected_sum(devices, all[j][0].size());
      for (size_t d = 0; d < all[j].size(); ++d) {
        EXPECT_EQ(all[j][d].device(), Device::cpu(static_cast<int>(d)));
        EXPECT_EQ(all[j][d].to_vector<double>(), want) << "key " << keys[j] << " device " << d;
      }
    }
  }
}

TEST_P(KVStoreTypes, PushThenPullAndBroadcast) {
  auto kv = kv::KVStore::create(GetParam());
  auto a = filled({2, 3}, DType::kFloat32, 0), b = filled({2, 3}, DType::kFloat32, 1);
  kv->init(3, nd::zeros({2, 3}));
  kv->push(3, {a, b});
  auto o0 = nd::zeros({2, 3}, {.device = Device::cpu(0)}), o1 = nd::zeros({2, 3}, {.device = Device::cpu(2)});
  kv->pull(3, {o0, o1});
  EXPECT_EQ(o0.to_vector<double>(), expected_sum(2, 6));
  EXPECT_EQ(o1.to_vector<double>(), expected_sum(2, 6));
  EXPECT_EQ(a.to_vector<double>(), filled({2, 3}, DType::kFloat32, 0).to_vector<double>());  // push reads only

  // Pushing again replaces the stored value (no updater: no accumulation).
  kv->push(3, {a});
  kv->pull(3, {o1});
  EXPECT_EQ(o1.to_vector<double>(), a.to_vector<double>());

  auto w = nd::array(std::vector<float>{1, 2, 3}, {3}, Device::cpu(1));
  auto w0 = nd::zeros({3}), w1 = nd::zeros({3}, {.device = Device::cpu(1)});
  kv->broadcast("w", w, {w0, w1});
  EXPECT_EQ(w0.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(w1.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  kv->broadcast("w", nd::full({3}, 5.0), {w1});  // existing key: overwritten
  EXPECT_EQ(w1.to_vector<float>(), (std::vector<float>{5, 5, 5}));
}

TEST_P(KVStoreTypes, HalfPrecisionSumsInFloat) {
  auto kv = kv::KVStore::create(GetParam());
  auto a = nd::full({5}, 1.5, {.dtype = DType::kFloat16, .device = Device::cpu(0)});
  auto b = nd::full({5}, 2.25, {.dtype = DType::kFloat16, .device = Device::cpu(1)});
  kv->init("h", a);
  kv->pushpull("h", {a, b}, {a, b});
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(5, 3.75f));
}

TEST_P(KVStoreTypes, ClearErrors) {
  auto kv = kv::KVStore::create(GetParam());
  auto x = nd::zeros({2, 3});
  std::string e = error_of<ValueError>([&] { kv->pull("missing", {x}); });
  EXPECT_CONTAINS(e, "unknown key 'missing'");
  EXPECT_CONTAINS(e, GetParam());
  kv->init("w", x);
  EXPECT_CONTAINS(error_of<ValueError>([&] { kv->init("w", x); }), "'w' is already initialized");
  e = error_of<ShapeError>([&] { kv->push("w", {x, nd::zeros({3, 2}, {.device = Device::cpu(1)})}); });
  EXPECT_CONTAINS(e, "key 'w'");
  EXPECT_CONTAINS(e, "[3,2]");
  EXPECT_CONTAINS(e, "[2,3]");
  EXPECT_CONTAINS(e, "cpu(1)");
  e = error_of<TypeError>([&] { kv->pushpull("w", {x}, {nd::zeros({2, 3}, {.dtype = DType::kFloat64})}); });
  EXPECT_CONTAINS(e, "float64");
  EXPECT_CONTAINS(e, "key 'w'");
  EXPECT_CONTAINS(error_of<ValueError>([&] { kv->push("w", {}); }), "no value given");
}

// push_batch is push of each item in order (the in-process types reduce
// them one by one); a refused item queues nothing.
TEST_P(KVStoreTypes, PushBatchEqualsPushes) {
  auto kv = kv::KVStore::create(GetParam());
  std::vector<kv::KVStore::PushItem> items;
  for (int k = 0; k < 5; ++k) {
    std::string key = fmt::format("b{}", k);
    std::vector<NDArray> values{filled({3 + k}, DType::kFloat32, 0), filled({3 + k}, DType::kFloat32, 1)};
    kv->init(key, values[0]);
    items.push_back({key, values, k});
  }
  kv->push_batch(items);
  for (const auto& item : items) {
    NDArray out = nd::zeros(item.values[0].shape());
    kv->pull(item.key, {out});
    EXPECT_EQ(out.to_vector<double>(), expected_sum(2, item.values[0].size())) << item.key;
  }
  NDArray before = nd::zeros({3});
  kv->pull("b0", {before});
  std::vector<kv::KVStore::PushItem> bad = {items[0], {"unknown", {nd::ones({3})}, 0}};
  EXPECT_CONTAINS(error_of<ValueError>([&] { kv->push_batch(bad); }), "unknown key 'unknown'");
  NDArray after = nd::zeros({3});
  kv->pull("b0", {after});
  EXPECT_EQ(after.to_vector<float>(), before.to_vector<float>());
}

INSTANTIATE_TEST_SUITE_P(Types, KVStoreTypes, ::testing::Values("local", "device"),
                         [](const auto& info) { return info.param; });

TEST(KVStore, CreateRejectsUnknownTypes) {
  EXPECT_CONTAINS(error_of<ValueError>([] { kv::KVStore::create("ring"); }), "unknown type 'ring'");
}

// Without a CUDA build, NCCL or a GPU (every CPU machine) the nccl store
// says which is missing.
TEST(KVStore, NcclWithoutAGpuIsNotSupportedAndSaysWhy) {
  const std::string why = kv::nccl_unavailable();
  if (why.empty()) GTEST_SKIP() << "NCCL and a GPU are available here (tests/cuda/cuda_nccl_test.cc covers them)";
  std::string msg = error_of<NotSupported>([] { kv::KVStore::create("nccl"); });
  EXPECT_CONTAINS(msg, "KVStore 'nccl' cannot be used");
  EXPECT_CONTAINS(msg, why);
  EXPECT_FALSE(kv::nccl_description().empty());
}

using Buckets = std::vector<kv::detail::BucketRange>;

Buckets plan(const std::vector<size_t>& bytes, size_t limit, const std::vector<int>& groups = {}) {
  std::vector<kv::detail::BucketItem> items;
  for (size_t i = 0; i < bytes.size(); ++i) items.push_back({bytes[i], groups.empty() ? 0 : groups[i]});
  return kv::detail::plan_buckets(items, limit);
}

TEST(NcclBuckets, ConsecutiveKeysFillBucketsUpToTheLimit) {
  EXPECT_EQ(plan({}, 25), Buckets{});
  EXPECT_EQ(plan({10, 10, 10}, 25), (Buckets{{0, 2}, {2, 3}}));
  EXPECT_EQ(plan({10, 15, 1}, 25), (Buckets{{0, 2}, {2, 3}}));  // exactly the limit fits
  EXPECT_EQ(plan({25}, 25), (Buckets{{0, 1}}));
  EXPECT_EQ(plan({0, 0, 25, 0}, 25), (Buckets{{0, 4}}));  // empty keys fit anywhere
  EXPECT_EQ(plan({1, 2, 3, 4, 5, 6, 7, 8}, 10), (Buckets{{0, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 8}}));
}

TEST(NcclBuckets, AKeyLargerThanABucketGoesAlone) {
  EXPECT_EQ(plan({5, 30, 5}, 25), (Buckets{{0, 1}, {1, 2}, {2, 3}}));
  EXPECT_EQ(plan({30, 30}, 25), (Buckets{{0, 1}, {1, 2}}));
  EXPECT_EQ(plan({30, 0}, 25), (Buckets{{0, 1}, {1, 2}}));
}

TEST(NcclBuckets, ADifferentDtypeOrDeviceSetClosesTheBucket) {
  EXPECT_EQ(plan({5, 5, 5, 5}, 25, {0, 1, 1, 0}), (Buckets{{0, 1}, {1, 3}, {3, 4}}));
  EXPECT_EQ(plan({5, 5}, 25, {3, 3}), (Buckets{{0, 2}}));
}

TEST(NcclBuckets, SizeFromTheEnvironment) {
  EXPECT_CONTAINS(error_of<ValueError>([] { plan({1}, 0); }), "bucket size");
  unsetenv("KILN_NCCL_BUCKET_MB");
  EXPECT_EQ(kv::detail::nccl_bucket_bytes(), size_t{25} << 20);
  setenv("KILN_NCCL_BUCKET_MB", "4", 1);
  EXPECT_EQ(kv::detail::nccl_bucket_bytes(), size_t{4} << 20);
  setenv("KILN_NCCL_BUCKET_MB", "0", 1);
  EXPECT_CONTAINS(error_of<ValueError>([] { kv::detail::nccl_bucket_bytes(); }), "KILN_NCCL_BUCKET_MB");
  unsetenv("KILN_NCCL_BUCKET_MB");
}

TEST(KVStore, DeviceTypeSpreadsKeysOverDevices) {
  auto kv = kv::KVStore::create("device");
  int on[2] = {0, 0};
  for (int k = 0; k < 8; ++k) {
    auto a = nd::ones({64}), b = nd::ones({64}, {.device = Device::cpu(1)});
    kv->init(k, a);
    kv->pushpull(k, {a, b}, {a, b});
    ++on[kv->home(std::to_string(k)).id];
  }
  EXPECT_EQ(on[0], 4);
  EXPECT_EQ(on[1], 4);
  auto local = kv::KVStore::create("local");
  auto b = nd::ones({4}, {.device = Device::cpu(1)});
  local->init("x", b);
  local->push("x", {b});
  EXPECT_EQ(local->home("x"), Device::cpu(0));
}

TEST(KVStore, ReductionWaitsForItsInputsOnly) {
  // A key whose value is still being produced does not hold back another key.
  auto kv = kv::KVStore::create("device");
  auto big = nd::random::normal({512, 512}), small0 = nd::ones({3}), small1 = nd::ones({3}, {.device = Device::cpu(1)});
  NDArray slow = nd::dot(big, big);
  auto slow1 = slow.copy_to(Device::cpu(1));
  kv->init("slow", slow);
  kv->init("small", small0);
  kv->pushpull("slow", {slow, slow1}, {slow, slow1}, 0);
  kv->pushpull("small", {small0, small1}, {small0, small1}, 1);
  EXPECT_EQ(small1.to_vector<float>(), std::vector<float>(3, 2.0f));
  auto s = slow.to_vector<float>(), s1 = slow1.to_vector<float>();
  EXPECT_EQ(s, s1);
}

}  // namespace
}  // namespace kiln
