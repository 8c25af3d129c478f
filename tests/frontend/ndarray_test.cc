// NDArray core: creation, random streams, views, copies, printing, errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <thread>

#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "frontend/ndarray.h"
#include "runtime/device_backend.h"
#include "runtime/engine.h"
#include "runtime/storage.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

class NDArrayOnDevice : public ::testing::TestWithParam<int> {
 protected:
  Device dev() const { return Device::cpu(GetParam()); }
};

TEST_P(NDArrayOnDevice, ConstantFills) {
  auto z = nd::zeros({2, 3}, {.device = dev()});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.device(), dev());
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(nd::ones({4}, {.dtype = DType::kInt64, .device = dev()}).to_vector<int64_t>(),
            std::vector<int64_t>(4, 1));
  EXPECT_EQ(nd::full({3}, 2.5, {.dtype = DType::kFloat64, .device = dev()}).to_vector<double>(),
            std::vector<double>(3, 2.5));
  auto h = nd::full({2}, 1.5, {.dtype = DType::kFloat16, .device = dev()});
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{1.5f, 1.5f}));
  EXPECT_EQ(nd::zeros({0, 3}, {.device = dev()}).to_vector<float>().size(), 0u);
}

TEST_P(NDArrayOnDevice, Arange) {
  EXPECT_EQ(nd::arange(5, {.device = dev()}).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(nd::arange(1, 2, 0.25, {.device = dev()}).to_vector<double>(), (std::vector<double>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(nd::arange(3, 0, -1, {.dtype = DType::kInt32, .device = dev()}).to_vector<int32_t>(),
            (std::vector<int32_t>{3, 2, 1}));
  EXPECT_EQ(nd::arange(0, {.device = dev()}).size(), 0);
  EXPECT_THROW(nd::arange(0, 1, 0), ValueError);
}

TEST_P(NDArrayOnDevice, ArrayFromHostValues) {
  auto a = nd::array(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, dev());
  EXPECT_EQ(a.dtype(), DType::kFloat32);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  auto b = nd::array(std::vector<int64_t>{7, 8}, dev());
  EXPECT_EQ(b.dtype(), DType::kInt64);
  EXPECT_EQ(b.shape(), (Shape{2}));
  EXPECT_THROW(b.item<int64_t>(), ValueError);
}

TEST_P(NDArrayOnDevice, RandomIsReproducibleAndWellDistributed) {
  nd::random::seed(42);
  auto a = nd::random::normal({1000, 1000}, 0, 1, {.device = dev()}).to_vector<double>();
  auto u = nd::random::uniform({100000}, -2, 3, {.device = dev()}).to_vector<double>();
  nd::random::seed(42);
  auto b = nd::random::normal({1000, 1000}, 0, 1, {.device = dev()}).to_vector<double>();
  EXPECT_EQ(a, b);
  double mean = std::accumulate(a.begin(), a.end(), 0.0) / a.size();
  double var = 0;
  for (double v : a) var += (v - mean) * (v - mean);
  var /= a.size();
  EXPECT_NEAR(mean, 0.0, 0.005);
  EXPECT_NEAR(var, 1.0, 0.005);
  double umin = *std::min_element(u.begin(), u.end()), umax = *std::max_element(u.begin(), u.end());
  EXPECT_GE(umin, -2.0);
  EXPECT_LT(umax, 3.0);
  EXPECT_NEAR(std::accumulate(u.begin(), u.end(), 0.0) / u.size(), 0.5, 0.02);
  // The next draw continues the stream instead of repeating it.
  auto c = nd::random::normal({4}, 0, 1, {.device = dev()}).to_vector<double>();
  EXPECT_NE(c[0], a[0]);
}
INSTANTIATE_TEST_SUITE_P(Cpu, NDArrayOnDevice, ::testing::Values(0, 1),
                         [](const auto& info) { return "cpu" + std::to_string(info.param); });

// Waits for `open` (at most 10 s, then fails the test so a broken engine
// does not hang the suite).
void wait_open(const std::atomic<bool>& open) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!open.load()) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "the gate never opened";
      return;
    }
    std::this_thread::yield();
  }
}

// The tests below hold an op on a gate while the frontend goes on: the
// synchronous engine would run it at once and never return.
bool engine_is_synchronous() { return engine::get().kind() == engine::Kind::kNaive; }

// An array dropped while an op writing it is pending keeps its storage until
// that op has finished (ops hold the engine variable, not the chunk).
TEST(NDArray, StorageOutlivesTheLastHandleUntilPendingOpsFinish) {
  if (engine_is_synchronous()) GTEST_SKIP() << "needs the threaded engine";
  engine::wait_all();
  storage::Pool& pool = storage::pool(Device::cpu(0));
  constexpr int64_t kN = 123457;  // a size class of its own in this test
  std::atomic<bool> open{false};
  std::atomic<int> wrote{0};
  int64_t in_use_before = pool.stats().in_use;
  {
    NDArray y = NDArray::empty({kN});
    float* data = static_cast<float*>(y.data());
    engine::get().push(
        [&open, &wrote, data](engine::RunContext) {
          wait_open(open);
          for (int64_t i = 0; i < kN; ++i) data[i] = 1.0f;  // the storage is still ours
          wrote.store(1);
        },
        {}, {y.var()}, {.name = "slow_fill"});
  }  // the last handle goes while slow_fill is pending
  EXPECT_GE(pool.stats().in_use, in_use_before + kN * 4);
  open.store(true);
  engine::wait_all();
  EXPECT_EQ(wrote.load(), 1);
  EXPECT_EQ(pool.stats().in_use, in_use_before);
}

// A queued kernel (invoke) reading a view of an array whose handles are all
// gone still reads that array's storage: the view's chunk variable keeps it.
TEST(NDArray, QueuedKernelReadsAViewAfterTheLastHandleGoes) {
  if (engine_is_synchronous()) GTEST_SKIP() << "needs the threaded engine";
  engine::wait_all();
  storage::Pool& pool = storage::pool(Device::cpu(0));
  // Without cached blocks each allocation below takes its own size class (a
  // larger cached block left by an earlier test in this process would be
  // counted at its class's size).
  pool.release_cached();
  constexpr int64_t kRows = 61, kCols = 1009;  // 246,196 bytes: a size class of its own here
  const int64_t bytes = static_cast<int64_t>(storage::round_size(kRows * kCols * 4));
  std::atomic<bool> open{false};
  int64_t in_use_before = pool.stats().in_use;
  NDArray z;
  {
    NDArray y = NDArray::empty({kRows, kCols});
    float* data = static_cast<float*>(y.data());
    engine::get().push(
        [&open, data](engine::RunContext) {
          wait_open(open);
          for (int64_t i = 0; i < kRows * kCols; ++i) data[i] = static_cast<float>(i % kCols);
        },
        {}, {y.var()}, {.name = "slow_fill"});
    z = y.at(kRows - 1).reshape({1, kCols}) + 1;  // queued behind slow_fill
  }
  EXPECT_EQ(pool.stats().in_use, in_use_before + bytes + static_cast<int64_t>(storage::round_size(kCols * 4)));
  open.store(true);
  std::vector<float> got = z.to_vector<float>();
  ASSERT_EQ(got.size(), static_cast<size_t>(kCols));
  for (int64_t j = 0; j < kCols; ++j) ASSERT_EQ(got[static_cast<size_t>(j)], static_cast<float>(j + 1)) << j;
  engine::wait_all();
  z = NDArray();
  EXPECT_EQ(pool.stats().in_use, in_use_before);
}

// When the op producing an array fails, the kernels queued on it are skipped
// and the storage of every array involved still goes back to the pool.
TEST(NDArray, StorageIsFreedWhenThePendingOpsFailOrAreSkipped) {
  if (engine_is_synchronous()) GTEST_SKIP() << "needs the threaded engine";
  engine::wait_all();
  storage::Pool& pool = storage::pool(Device::cpu(0));
  constexpr int64_t kN = 123461;
  std::atomic<bool> open{false};
  int64_t in_use_before = pool.stats().in_use;
  {
    NDArray y = NDArray::empty({kN});
    engine::get().push(
        [&open](engine::RunContext) {
          wait_open(open);
          throw ValueError("the producer failed");
        },
        {}, {y.var()}, {.name = "failing_fill"});
    NDArray z = nd::exp(y * 2);  // two kernels queued behind the failing producer
    NDArray w = z + 1;
  }  // every handle goes while all four ops are pending
  EXPECT_GE(pool.stats().in_use, in_use_before + kN * 4 * 4);
  open.store(true);
  EXPECT_THROW(engine::wait_all(), ValueError);
  EXPECT_EQ(pool.stats().in_use, in_use_before);
}

TEST(NDArray, ItemNeedsOneElement) {
  EXPECT_FLOAT_EQ(nd::full({1, 1}, 3.0).item(), 3.0f);
  EXPECT_THROW(nd::zeros({2}).item(), ValueError);
}

TEST(NDArray, DevicesHaveIndependentStreams) {
  nd::random::seed(7);
  auto a = nd::random::uniform({8}, 0, 1, {.device = Device::cpu(0)}).to_vector<float>();
  auto b = nd::random::uniform({8}, 0, 1, {.device = Device::cpu(1)}).to_vector<float>();
  EXPECT_NE(a, b);
}

TEST(NDArray, AtIsAViewSharingStorage) {
  auto a = nd::array(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  auto row = a.at(1);
  EXPECT_EQ(row.shape(), (Shape{2}));
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(a.at(-1).to_vector<float>(), (std::vector<float>{5, 6}));
  row.assign(9.0);  // writes through the view
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 9, 9, 5, 6}));
  EXPECT_THROW(a.at(3), IndexError);
  EXPECT_THROW(nd::full({}, 1.0).at(0), IndexError);
}

TEST(NDArray, CopyToAnotherDevice) {
  auto a = nd::arange(6).reshape({2, 3});
  auto b = a.copy_to(Device::cpu(1));
  EXPECT_EQ(b.device(), Device::cpu(1));
  EXPECT_EQ(b.shape(), (Shape{2, 3}));
  a.assign(0.0);  // later writes to `a` do not reach the copy
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  if (device_count(DeviceKind::kCUDA) == 0) {
    EXPECT_THROW(a.copy_to(Device::cuda(0)), DeviceError);  // no GPU: a clear error
  }
}

TEST(NDArray, ReshapeViewUsesMXNetSpecialValues) {
  auto a = nd::arange(24).reshape({2, 3, 4});
  EXPECT_EQ(a.reshape({-1}).shape(), (Shape{24}));
  EXPECT_EQ(a.reshape({0, -1}).shape(), (Shape{2, 12}));
  EXPECT_EQ(a.reshape({-3, 4}).shape(), (Shape{6, 4}));
  EXPECT_THROW(a.reshape({5, -1}), ShapeError);
  EXPECT_EQ(a.reshape({4, 6}).to_vector<float>()[23], 23.0f);
}

TEST(NDArray, PrintsLikeNumPyWithDevice) {
  auto a = nd::array(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, Device::cpu(1));
  EXPECT_EQ(a.to_string(), "[[1. 2. 3.]\n [4. 5. 6.]]\n<NDArray 2x3 @cpu(1)>");
  auto b = nd::array(std::vector<float>{0.5f, -1.25f});
  EXPECT_EQ(b.to_string(), "[  0.5 -1.25]\n<NDArray 2 @cpu(0)>");
  auto c = nd::array(std::vector<int32_t>{1, -20}, Device::cpu(0));
  EXPECT_EQ(c.to_string(), "[  1 -20]\n<NDArray 2 int32 @cpu(0)>");
  auto big = nd::zeros({100, 100});
  std::string s = big.to_string();
  EXPECT_NE(s.find("..."), std::string::npos);
  EXPECT_LT(s.size(), 400u);
  EXPECT_EQ(NDArray().to_string(), "<NDArray none>");
}

TEST(NDArray, ReadingAFailedValueRethrowsTheProducersError) {
  auto a = nd::zeros({2});
  engine::get().push([](engine::RunContext) { throw ValueError("the disk is on fire"); }, {}, {a.var()},
                     {.device = a.device(), .name = "failing_producer"});
  try {
    a.to_vector<float>();
    FAIL() << "expected the producer's error";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("failing_producer"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the disk is on fire"), std::string::npos) << msg;
  }
  try {
    engine::wait_all();
  } catch (const Error&) {
  }
  // Unrelated arrays still work, and a clean overwrite clears the poison.
  EXPECT_EQ(nd::ones({1}).item(), 1.0f);
  a.assign(3.0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{3, 3}));
}

TEST(NDArray, NoneArraysAreRejectedClearly) {
  NDArray none;
  EXPECT_TRUE(none.is_none());
  EXPECT_THROW(none.to_vector<float>(), ValueError);
  EXPECT_THROW(none.wait_to_read(), ValueError);
  EXPECT_THROW(none.copy(), ValueError);
}

TEST(NDArray, NegativeSizesAndUnknownDevicesAreClearErrors) {
  EXPECT_THROW(nd::zeros({2, -3}), ShapeError);
  EXPECT_THROW(nd::zeros({2}, {.device = Device::cpu(kMaxDevicesPerKind)}), DeviceError);
  EXPECT_THROW(nd::array(std::vector<float>{1, 2, 3}, {2, 2}), ShapeError);
}

// An integer fill that does not fit its dtype is refused, naming both; the
// edges of each range are accepted.
TEST(NDArray, IntegerFillsMustFitTheirDtype) {
  EXPECT_EQ(nd::full({2}, 127, {.dtype = DType::kInt8}).to_vector<int64_t>(), (std::vector<int64_t>{127, 127}));
  EXPECT_EQ(nd::full({1}, -128, {.dtype = DType::kInt8}).to_vector<int64_t>(), std::vector<int64_t>{-128});
  EXPECT_EQ(nd::full({1}, -9223372036854775808.0, {.dtype = DType::kInt64}).to_vector<int64_t>(),
            std::vector<int64_t>{std::numeric_limits<int64_t>::min()});
  std::string msg = test::error_of<ValueError>([] { nd::full({2}, 128, {.dtype = DType::kInt8}); });
  EXPECT_CONTAINS(msg, "value 128 does not fit dtype int8");
  EXPECT_CONTAINS(msg, "[-128, 128)");
  EXPECT_THROW(nd::full({2}, 9223372036854775808.0, {.dtype = DType::kInt64}), ValueError);  // 2^63
  EXPECT_THROW(nd::full({2}, -1, {.dtype = DType::kUint8}), ValueError);
  EXPECT_THROW(nd::full({2}, std::nan(""), {.dtype = DType::kInt32}), ValueError);
  EXPECT_EQ(nd::full({1}, 2.5, {.dtype = DType::kBool}).to_vector<int64_t>(), std::vector<int64_t>{1});
}

TEST(NDArray, FailedInferenceQueuesNothing) {
  auto a = nd::zeros({2});
  engine::wait_all();
  int64_t before = engine::get().num_pending();
  const OpDef& full = op_def(OpId::kFull);
  EXPECT_THROW(invoke(OpId::kFull, {a}, full.parse_attrs(full.name, {{"value", "1"}})), ValueError);
  EXPECT_EQ(engine::get().num_pending(), before);
}

}  // namespace
}  // namespace kiln
