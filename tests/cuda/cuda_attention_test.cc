// Attention on a GPU. There is no CUDA kernel for _kiln_attention or its
// backward op, so a GPU runs their decompositions (ir/decompose.h): the op
// invoked directly (as a SymbolBlock loaded from MXNet JSON does), and a
// block traced with the fused op and trained hybridized. Both must equal the
// CPU's fused kernels. Skips with one line on a machine without a GPU.
#include <gtest/gtest.h>

#include <span>

#include "frontend/invoke.h"
#include "frontend/kiln.h"
#include "frontend/nd.h"
#include "frontend/nd_attention.h"
#include "ir/ops/attention.h"
#include "runtime/kernel.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/frontend/attention_grads.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

constexpr Device kGpu = Device::cuda(0);

using test::AttentionGrads;

// TF32 products on the GPU (allowed by default) against float32 on the CPU.
constexpr double kTol = 5e-3;

// Output and input gradients of sum(attention(q, k, v) * w) on `device`.
template <typename F>
AttentionGrads run(F&& attention, Device device, bool causal) {
  const Shape s{2, 3, 37, 16};
  auto values = [&](const Shape& shape, uint64_t seed) {
    return nd::array(test::uniform(shape.size(), -1.5, 1.5, seed), shape).copy_to(device);
  };
  return test::attention_grads(
      [&](const NDArray& q, const NDArray& k, const NDArray& v) { return attention(q, k, v, causal); },
      values(s, 1), values(s, 2), values(s, 3), [&](const Shape& shape) { return values(shape, 4); });
}

void expect_same(const AttentionGrads& got, const AttentionGrads& want, const std::string& what) {
  test::expect_same(got, want, kTol, what);
}

NDArray fused(const NDArray& q, const NDArray& k, const NDArray& v, bool causal) {
  return invoke(OpId::kAttention, {q, k, v}, OpAttrs::make(AttentionAttrs{.causal = causal}))[0];
}

TEST(CudaAttention, TheFusedOpRunsAsItsDecompositionAndMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  EXPECT_FALSE(has_kernel(OpId::kAttention, DeviceKind::kCUDA)) << "a CUDA kernel exists now: test it directly";
  for (bool causal : {false, true})
    expect_same(run(fused, kGpu, causal), run(fused, Device::cpu(0), causal), causal ? "causal" : "not causal");
}

struct AttentionBlock : nn::HybridBlock {
  bool causal = false;
  std::vector<NDArray> forward(std::span<const NDArray> x) override {
    return {invoke(OpId::kAttention, {x[0], x[1], x[2]}, OpAttrs::make(AttentionAttrs{.causal = causal}))[0]};
  }
};

TEST(CudaAttention, AHybridizedBlockHoldingTheFusedOpTrainsOnTheGpu) {
  KILN_REQUIRE_CUDA();
  AttentionBlock block;
  block.causal = true;
  block.hybridize();
  auto call = [&](const NDArray& q, const NDArray& k, const NDArray& v, bool) {
    std::vector<NDArray> in{q, k, v};
    return block(std::span<const NDArray>(in))[0];
  };
  expect_same(run(call, kGpu, true), run(fused, Device::cpu(0), true), "hybridized");
}

}  // namespace
}  // namespace kiln
