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
#include "tests/test_util.h"

namespace kiln {
namespace {

constexpr Device kGpu = Device::cuda(0);

// Output and input gradients of sum(attention(q, k, v) * w) on `device`.
struct Result {
  NDArray out, dq, dk, dv;
};

template <typename F>
Result run(F&& attention, Device device, bool causal) {
  const Shape s{2, 3, 37, 16};
  auto values = [&](uint64_t seed) { return nd::array(test::uniform(s.size(), -1.5, 1.5, seed), s).copy_to(device); };
  NDArray q = values(1), k = values(2), v = values(3), w = values(4);
  for (NDArray* x : {&q, &k, &v}) x->attach_grad();
  Result r;
  {
    autograd::Record record;
    r.out = attention(q, k, v, causal);
    autograd::backward({nd::sum(r.out * w)});
  }
  r.out = r.out.copy_to(Device::cpu(0));
  r.dq = q.grad().copy_to(Device::cpu(0));
  r.dk = k.grad().copy_to(Device::cpu(0));
  r.dv = v.grad().copy_to(Device::cpu(0));
  return r;
}

// TF32 products on the GPU (allowed by default) against float32 on the CPU.
constexpr double kTol = 5e-3;

void expect_same(const Result& got, const Result& want, const std::string& what) {
  test::expect_close(got.out, want.out, kTol, what + ": out");
  test::expect_close(got.dq, want.dq, kTol, what + ": dq");
  test::expect_close(got.dk, want.dk, kTol, what + ": dk");
  test::expect_close(got.dv, want.dv, kTol, what + ": dv");
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
