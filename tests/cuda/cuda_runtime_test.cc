// The CUDA device runtime: caching allocator (statistics, cache, OOM),
// copies between the host and the GPU, error surfacing through the engine.
// Every test skips with one line on a machine without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/cuda/caching_allocator.h"
#include "frontend/invoke.h"
#include "ir/ops/fused_layers.h"
#include "frontend/nd.h"
#include "frontend/nd_conv.h"
#include "frontend/nd_nn.h"
#include "frontend/ndarray.h"
#include "runtime/device_backend.h"
#include "runtime/engine.h"
#include "runtime/storage.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

constexpr Device kGpu = Device::cuda(0);

TEST(CudaAllocator, CachesFreedBlocksAndCountsThem) {
  KILN_REQUIRE_CUDA();
  storage::Pool& pool = storage::pool(kGpu);
  pool.release_cached();
  pool.reset_peak();
  storage::Stats before = pool.stats();
  storage::Block a = pool.alloc(1000);
  EXPECT_NE(a.ptr, nullptr);
  EXPECT_GE(a.size, 1000u);
  EXPECT_EQ(a.device, kGpu);
  storage::Stats mid = pool.stats();
  EXPECT_EQ(mid.in_use - before.in_use, static_cast<int64_t>(a.size));
  cuda::AllocatorStats detailed = cuda::allocator_stats(0);
  EXPECT_GE(detailed.reserved, detailed.basic.in_use);
  EXPECT_GT(detailed.fragmentation(), 0.0);  // 1000 bytes asked, more reserved
  pool.free(a);
  storage::Stats after_free = pool.stats();
  EXPECT_EQ(after_free.in_use, before.in_use);
  EXPECT_EQ(after_free.cached - before.cached, static_cast<int64_t>(a.size));
  storage::Block b = pool.alloc(1000);  // same size class: from the cache
  EXPECT_EQ(b.ptr, a.ptr);
  EXPECT_EQ(pool.stats().num_cache_hits - before.num_cache_hits, 1);
  pool.free(b);
  EXPECT_GE(pool.release_cached(), static_cast<int64_t>(b.size));
  EXPECT_EQ(pool.stats().cached, 0);
  EXPECT_GE(pool.stats().peak_in_use, static_cast<int64_t>(a.size));
}

TEST(CudaAllocator, OutOfMemoryNamesTheRequestAndRecovers) {
  KILN_REQUIRE_CUDA();
  storage::Pool& pool = storage::pool(kGpu);
  // A request no GPU can serve: cudaMalloc fails, the cache is freed, the retry fails.
  std::string msg = test::error_of<OutOfMemory>([&] { pool.alloc(size_t{1} << 50); });
  EXPECT_CONTAINS(msg, "cuda(0)");
  EXPECT_CONTAINS(msg, std::to_string(size_t{1} << 50));
  EXPECT_CONTAINS(msg, "MiB free of");
  // The process keeps working.
  storage::Block ok = pool.alloc(4096);
  EXPECT_NE(ok.ptr, nullptr);
  pool.free(ok);
}

TEST(CudaAllocator, TestLimitFreesTheCacheBeforeFailing) {
  KILN_REQUIRE_CUDA();
  storage::Pool& pool = storage::pool(kGpu);
  pool.release_cached();
  storage::Block cached = pool.alloc(1 << 20);
  pool.free(cached);  // 1 MiB cached
  int64_t reserved = cuda::allocator_stats(0).reserved;
  pool.set_system_limit(reserved + (1 << 20) + (1 << 19));
  // 2 MiB more does not fit beside the cached 1 MiB: the cache is released, then it fits.
  storage::Block big = pool.alloc(2 << 20);
  EXPECT_EQ(pool.stats().cached, 0);
  std::string msg = test::error_of<OutOfMemory>([&] { pool.alloc(8 << 20); });
  EXPECT_CONTAINS(msg, "test limit");
  pool.free(big);
  pool.set_system_limit(-1);
  pool.release_cached();
}

TEST(CudaCopy, RoundTripsThroughTheGpu) {
  KILN_REQUIRE_CUDA();
  // 0 elements, one, and more than two staging chunks (4 MiB each).
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{(9 << 20) / 4 + 3}}) {
    std::vector<float> values(static_cast<size_t>(n));
    std::iota(values.begin(), values.end(), 0.5f);
    NDArray host = nd::array<float>(values, Shape{n});
    NDArray gpu = host.copy_to(kGpu);
    EXPECT_EQ(gpu.device(), kGpu);
    NDArray gpu2 = gpu.copy_to(kGpu);  // device to device
    NDArray back = gpu2.copy_to(Device::cpu(0));
    EXPECT_EQ(back.to_vector<float>(), values) << n << " elements";
  }
}

TEST(CudaCopy, ArraysAndFillsOnTheGpu) {
  KILN_REQUIRE_CUDA();
  NDArray a = nd::array<float>(std::vector<float>{1, 2, 3, 4}, Shape{2, 2}, kGpu);
  EXPECT_EQ(a.device(), kGpu);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  NDArray z = nd::zeros({3}, {.device = kGpu});
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{0, 0, 0}));
  NDArray s = a + a;
  EXPECT_EQ(s.device(), kGpu);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
}

// FullyConnected and _kiln_fc_act (ReLU) through cuBLASLt's epilogues agree
// with the unfused path (product, bias kernel, activation kernel) and with the
// CPU: float32 without TF32 to float32 precision, bf16 to one rounding; with
// and without a bias; sizes that are and are not multiples of 8 (the latter
// take the unfused path in 16 bits).
TEST(CudaLtDense, EpiloguesMatchTheUnfusedPathAndTheCpu) {
  KILN_REQUIRE_CUDA();
  const bool tf32 = cuda::testing::set_tf32_allowed(false);
  struct Case {
    int64_t m, k, n;
  };
  for (const Case& c : {Case{64, 512, 256}, Case{5, 24, 10}, Case{256, 128, 16}})
    for (DType t : {DType::kFloat32, DType::kBfloat16})
      for (bool bias : {false, true})
        for (bool relu : {false, true}) {
          nd::random::seed(static_cast<uint64_t>(c.m + c.k));
          NDArray x = nd::random::normal({c.m, c.k}).astype(t), w = nd::random::normal({c.n, c.k}).astype(t);
          NDArray b = nd::random::normal({c.n}).astype(t);
          FcActAttrs a;
          a.num_hidden = c.n;
          a.no_bias = !bias;
          std::vector<NDArray> in{x, w};
          if (bias) in.push_back(b);
          auto run = [&](Device d, bool lt) {
            const bool before = cuda::testing::set_lt_enabled(lt);
            std::vector<NDArray> on;
            for (const NDArray& v : in) on.push_back(v.copy_to(d));
            NDArray y = relu ? invoke1(OpId::kFcAct, on, OpAttrs::make(a))
                             : invoke1(OpId::kFullyConnected, on, OpAttrs::make(static_cast<FullyConnectedAttrs>(a)));
            std::vector<double> v = y.to_vector<double>();
            cuda::testing::set_lt_enabled(before);
            return v;
          };
          const std::vector<double> cpu = run(Device::cpu(0), true), lt = run(kGpu, true), plain = run(kGpu, false);
          const double tol = t == DType::kFloat32 ? 1e-5 : 1.0 / 64;
          for (size_t i = 0; i < cpu.size(); ++i) {
            const double scale = 1 + std::abs(cpu[i]);
            ASSERT_NEAR(lt[i], cpu[i], tol * scale) << dtype_name(t) << " " << c.m << "x" << c.k << "x" << c.n
                                                    << " bias " << bias << " relu " << relu << " element " << i;
            ASSERT_NEAR(lt[i], plain[i], tol * scale) << "against the unfused path, element " << i;
          }
        }
  cuda::testing::set_tf32_allowed(tf32);
}

TEST(CudaCopy, MixingDevicesNamesBoth) {
  KILN_REQUIRE_CUDA();
  NDArray a = nd::ones({2}, {.device = kGpu});
  NDArray b = nd::ones({2});
  std::string msg = test::error_of<DeviceError>([&] { (void)(a + b); });
  EXPECT_CONTAINS(msg, "cuda(0)");
  EXPECT_CONTAINS(msg, "cpu(0)");
}

TEST(CudaErrors, LaunchErrorSurfacesWithTheOpName) {
  KILN_REQUIRE_CUDA();
  NDArray out = nd::zeros({4}, {.device = kGpu});
  engine::get().push([](engine::RunContext rc) { cuda::testing::launch_bad_config(rc.stream); }, {}, {out.var()},
                     {.device = kGpu, .name = "bad_launch"});
  std::string msg = test::error_of<Error>([&] { out.wait_to_read(); });
  EXPECT_CONTAINS(msg, "bad_launch on cuda(0)");
  // 2,048 threads in a block: CUDA 12 reports cudaErrorInvalidConfiguration,
  // CUDA 13 (driver 580) cudaErrorInvalidValue; either way from the launch check.
  EXPECT_CONTAINS(msg, "cudaGetLastError()");
  EXPECT_CONTAINS(msg, "cudaErrorInvalid");
  // The engine and the GPU keep working.
  NDArray ok = nd::ones({4}, {.device = kGpu}) * 3.0;
  EXPECT_EQ(ok.to_vector<float>(), (std::vector<float>{3, 3, 3, 3}));
}

TEST(CudaErrors, DilatedPoolingIsRefusedNamingCudnn) {
  KILN_REQUIRE_CUDA();
  // cuDNN pooling has no dilation: the CUDA kernel refuses (the CPU runs it).
  NDArray x = nd::ones({1, 1, 8, 8}, {.device = kGpu});
  std::string msg = test::error_of<Error>([&] {
    nd::pooling(x, {.kernel = {2, 2}, .dilate = {2, 2}}).wait_to_read();
  });
  EXPECT_CONTAINS(msg, "dilate=(2, 2)");
  EXPECT_CONTAINS(msg, "cuDNN pooling has no dilation");
  NDArray ok = nd::pooling(x, {.kernel = {2, 2}, .dilate = {1, 1}});
  EXPECT_EQ(ok.shape(), (Shape{1, 1, 7, 7}));
  EXPECT_EQ(ok.to_vector<float>()[0], 1.0f);
}

// Asynchronous lanes (KILN_CUDA_LANES=async): compute ops complete at launch.
// Each test switches the mode on for itself, whatever the environment says.
class AsyncLanes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count(DeviceKind::kCUDA) == 0) return;
    engine::wait_all();
    was_async_ = cuda::testing::lanes_async();
    cuda::testing::set_lanes_async(true);
  }
  void TearDown() override {
    if (device_count(DeviceKind::kCUDA) == 0) return;
    engine::wait_all();
    cuda::testing::set_lanes_async(was_async_);
  }
  bool was_async_ = false;
};

TEST_F(AsyncLanes, ACopyWaitsForTheKernelsQueuedBeforeIt) {
  KILN_REQUIRE_CUDA();
  const int64_t n = int64_t{1} << 22;
  NDArray x = nd::zeros({n}, {.device = kGpu});
  for (int i = 0; i < 200; ++i) x = x + 1.0;
  std::vector<float> v = x.to_vector<float>();  // a device-to-host copy right behind 200 queued kernels
  EXPECT_EQ(std::count(v.begin(), v.end(), 200.0f), n);
}

TEST_F(AsyncLanes, MemoryReusedByACopyIsNotOverwrittenUnderAQueuedKernel) {
  KILN_REQUIRE_CUDA();
  const int64_t n = int64_t{1} << 22;
  NDArray sum;
  {
    NDArray a = nd::ones({n}, {.device = kGpu});
    NDArray acc = a;
    for (int i = 0; i < 100; ++i) acc = acc + a;  // 100 queued kernels read a
    sum = acc;
  }  // a's block is back in the pool while those kernels may still be queued
  std::vector<float> big(static_cast<size_t>(n), 1000.0f);
  NDArray b = nd::array<float>(big, Shape{n}, kGpu);  // from the pool (a's block): written by a host-to-device copy
  std::vector<float> got = sum.to_vector<float>();
  EXPECT_EQ(std::count(got.begin(), got.end(), 101.0f), n);
  EXPECT_EQ(b.to_vector<float>(), big);
}

TEST_F(AsyncLanes, AWaitDrainsTheComputeStream) {
  KILN_REQUIRE_CUDA();
  NDArray x = nd::zeros({int64_t{1} << 22}, {.device = kGpu});
  for (int i = 0; i < 200; ++i) x = x * 1.5 + 1.0;
  x.wait_to_read();
  EXPECT_TRUE(cuda::testing::compute_stream_idle(0));
}

// A bad label is checked without a read-back per op: the kernel writes a
// mapped host flag, read at the next wait (backends/cuda/deferred_check.h).
TEST_F(AsyncLanes, ABadLabelSurfacesAtTheNextWaitWithItsValueAndRow) {
  KILN_REQUIRE_CUDA();
  NDArray logits = nd::zeros({4, 3}, {.device = kGpu});
  NDArray labels = nd::array<float>({0, 2, 7, 1}, Shape{4}, kGpu);
  NDArray loss = nd::softmax_cross_entropy(logits, labels);  // queued: no throw, no wait
  std::string msg = test::error_of<ValueError>([&] { engine::wait_all(); });
  EXPECT_CONTAINS(msg,
                  "_kiln_softmax_cross_entropy on cuda(0): label 7 at position 2 is out of range for 3 classes");
  EXPECT_CONTAINS(msg, "(found at a later wait");
  // Reported once; the GPU and later checks keep working.
  engine::wait_all();
  NDArray good = nd::softmax_cross_entropy(logits, nd::array<float>({0, 1, 2, 1}, Shape{4}, kGpu));
  EXPECT_NEAR(good.to_vector<float>()[0], std::log(3.0f), 1e-6);
}

TEST_F(AsyncLanes, MoreCheckedOpsThanFlagsInFlightWithoutAWait) {
  KILN_REQUIRE_CUDA();
  NDArray logits = nd::zeros({64, 10}, {.device = kGpu});
  NDArray labels = nd::zeros({64}, {.device = kGpu});
  NDArray total = nd::zeros({64}, {.device = kGpu});
  for (int i = 0; i < 600; ++i) total = total + nd::softmax_cross_entropy(logits, labels);
  std::vector<float> v = total.to_vector<float>();
  EXPECT_NEAR(v[0], 600 * std::log(10.0f), 1e-2);
}

TEST(CudaErrors, ABadLabelWithSynchronousLanesNamesTheOp) {
  KILN_REQUIRE_CUDA();
  engine::wait_all();
  const bool was_async = cuda::testing::lanes_async();
  cuda::testing::set_lanes_async(false);
  NDArray logits = nd::zeros({2, 3}, {.device = kGpu});
  NDArray labels = nd::array<float>({-2, 1}, Shape{2}, kGpu);
  // Synchronous lanes run the op before the call returns: the error comes from the call or its wait.
  std::string msg = test::error_of<Error>([&] { nd::softmax_cross_entropy(logits, labels).wait_to_read(); });
  EXPECT_CONTAINS(msg, "_kiln_softmax_cross_entropy on cuda(0): label -2 at position 0 is out of range for 3 classes");
  EXPECT_EQ(msg.find("at a later wait"), std::string::npos) << msg;
  // wait_all rethrows the engine's record of the op's failure once.
  EXPECT_CONTAINS(test::error_of<Error>([] { engine::wait_all(); }), "label -2");
  engine::wait_all();
  cuda::testing::set_lanes_async(was_async);
}

TEST(CudaErrors, NoSuchGpuIsADeviceError) {
  KILN_REQUIRE_CUDA();
  Device missing = Device::cuda(device_count(DeviceKind::kCUDA));
  std::string msg = test::error_of<DeviceError>([&] { (void)nd::zeros({1}, {.device = missing}); });
  EXPECT_CONTAINS(msg, missing.to_string());
}

}  // namespace
}  // namespace kiln
