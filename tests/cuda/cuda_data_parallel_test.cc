// Data parallelism with a GPU: the KVStore's local and device types over
// [cuda(0), cpu(0)] (a GPU sums with its add_n kernel, values of the other
// device are staged by copies), and LeNet trained on [cuda(0), cpu(0)] ending
// with the parameters of a one-device run (the chapter's 12.6 on the
// hardware one GPU allows). TF32 is off here: the comparison is float32
// against float32. Every test skips with one line without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "frontend/kvstore.h"
#include "frontend/nd.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/data_parallel_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

[[maybe_unused]] const bool kTf32Off = [] { return setenv("KILN_CUDA_TF32", "0", 1) == 0; }();

constexpr Device kGpu = Device::cuda(0);
constexpr Device kCpu = Device::cpu(0);

class MixedStore : public ::testing::TestWithParam<std::string> {};

TEST_P(MixedStore, SumsAGpuAndACpuValue) {
  KILN_REQUIRE_CUDA();
  auto kv = kv::KVStore::create(GetParam());
  NDArray g = nd::array(std::vector<float>{1, 2, 3, 4}).copy_to(kGpu);
  NDArray c = nd::array(std::vector<float>{10, 20, 30, 40});
  kv->init("w", c);
  kv->pushpull("w", {g, c}, {g, c});
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{11, 22, 33, 44}));
  // A second key, GPU first: the device type may home it on the GPU.
  NDArray g2 = nd::ones({1000}, {.device = kGpu}) * 2.0;
  NDArray c2 = nd::ones({1000}) * 3.0;
  kv->init("b", g2);
  kv->push("b", {g2, c2});
  NDArray out_gpu = nd::zeros({1000}, {.device = kGpu}), out_cpu = nd::zeros({1000});
  kv->pull("b", {out_gpu, out_cpu});
  EXPECT_EQ(out_gpu.to_vector<float>(), std::vector<float>(1000, 5.0f));
  EXPECT_EQ(out_cpu.to_vector<float>(), std::vector<float>(1000, 5.0f));
}

INSTANTIATE_TEST_SUITE_P(Types, MixedStore, ::testing::Values("local", "device"));

struct GpuDpCase {
  std::string kvstore;
  bool hybridize;
  int64_t batch;
  friend void PrintTo(const GpuDpCase& c, std::ostream* os) {
    *os << c.kvstore << (c.hybridize ? " hybridized" : " imperative") << " batch " << c.batch;
  }
};

class GpuDataParallelLeNet : public ::testing::TestWithParam<GpuDpCase> {};

TEST_P(GpuDataParallelLeNet, GpuAndCpuMatchOneDevice) {
  KILN_REQUIRE_CUDA();
  const GpuDpCase& c = GetParam();
  const std::vector<Device> mixed = {kGpu, kCpu};
  test::RunResult one = test::train_lenet({kCpu}, "auto", c.hybridize, c.batch, 3);
  test::RunResult many = test::train_lenet(mixed, c.kvstore, c.hybridize, c.batch, 3);
  // cuDNN and oneDNN add in different orders: float32 rounding, not TF32.
  test::expect_same_params(one, many, mixed, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Stores, GpuDataParallelLeNet,
                         ::testing::Values(GpuDpCase{"device", false, 8}, GpuDpCase{"local", false, 7},
                                           GpuDpCase{"auto", true, 8}),
                         [](const auto& info) {
                           return fmt::format("{}_{}_b{}", info.param.kvstore,
                                              info.param.hybridize ? "hybrid" : "eager", info.param.batch);
                         });

}  // namespace
}  // namespace kiln
