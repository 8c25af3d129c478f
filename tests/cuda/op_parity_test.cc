// Every op with a CPU kernel, run on cuda(0) against cpu(0) on small random
// inputs, with per-op tolerances: the cases of tests/op_cases.h, which has one
// or more per op (`Cases.EveryOpWithACpuKernelHasACase` in
// tests/frontend/low_precision_test.cc fails when an op is added without one).
// `OpParity.EveryOpMatchesTheCpu` lists every op without a CUDA kernel in one
// message and fails on a GPU machine while the list is not empty, except the
// ops in cpu_only(), whose callers run a decomposition where the device has
// no kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "frontend/ndarray.h"
#include "ir/op.h"
#include "runtime/kernel.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/op_cases.h"

namespace kiln {
namespace {

using namespace op_cases;

// Ops that run on the CPU only, with the reason.
const std::map<std::string, std::string>& cpu_only() {
  static const std::map<std::string, std::string> m = {
      {"_kiln_attention", "nd::scaled_dot_product_attention runs attention_reference where has_kernel is false"},
      {"_backward_kiln_attention", "the gradient of _kiln_attention, which runs on the CPU only"},
  };
  return m;
}

// The comparison is against float32 on the CPU: TF32 tensor-core math (the
// CUDA backend's default) is turned off before the first GPU op reads it.
[[maybe_unused]] const bool kTf32Off = [] { return setenv("KILN_CUDA_TF32", "0", 1) == 0; }();

// Every op having a case is checked by tests/frontend/low_precision_test.cc
// (built on every machine).
TEST(Cases, OpsWithoutACudaKernel) {
  // For information on every machine (OpParity fails on these on a GPU machine).
  std::vector<std::string> no_cuda;
  for (const OpDef& def : all_ops())
    if (has_kernel(def.id, DeviceKind::kCPU) && !has_kernel(def.id, DeviceKind::kCUDA)) no_cuda.emplace_back(def.name);
  std::cout << "[ info ] ops with a CPU kernel but no CUDA kernel: "
            << (no_cuda.empty() ? std::string("none") : fmt::format("{}", fmt::join(no_cuda, ", "))) << "\n";
}

// The CUDA kernels that read and write float16/bfloat16 themselves instead of
// going through the widening adaptor (checked on every machine; their 16-bit
// results are compared with the CPU's by EveryOpIn16BitFloatsMatchesTheCpu).
TEST(Cases, CudaKernelsTake16BitFloatsDirectly) {
  const OpId native[] = {
      OpId::kElemwiseAdd, OpId::kElemwiseSub, OpId::kElemwiseMul, OpId::kElemwiseDiv, OpId::kBroadcastAdd,
      OpId::kBroadcastSub, OpId::kBroadcastMul, OpId::kBroadcastDiv, OpId::kBroadcastPower, OpId::kBroadcastMaximum,
      OpId::kBroadcastMinimum, OpId::kBroadcastMod, OpId::kBroadcastFmod, OpId::kBroadcastEqual,
      OpId::kBroadcastNotEqual, OpId::kBroadcastGreater, OpId::kBroadcastGreaterEqual, OpId::kBroadcastLesser,
      OpId::kBroadcastLesserEqual, OpId::kPlusScalar, OpId::kMinusScalar, OpId::kRMinusScalar, OpId::kMulScalar,
      OpId::kDivScalar, OpId::kRDivScalar, OpId::kPowerScalar, OpId::kRPowerScalar, OpId::kMaximumScalar,
      OpId::kMinimumScalar, OpId::kEqualScalar, OpId::kNotEqualScalar, OpId::kGreaterScalar,
      OpId::kGreaterEqualScalar, OpId::kLesserScalar, OpId::kLesserEqualScalar, OpId::kExp, OpId::kLog, OpId::kSqrt,
      OpId::kSquare, OpId::kTanh, OpId::kErf, OpId::kSin, OpId::kCos, OpId::kTan, OpId::kArcsin, OpId::kArccos,
      OpId::kArctan, OpId::kSinh, OpId::kCosh, OpId::kArcsinh, OpId::kArccosh, OpId::kArctanh, OpId::kRound,
      OpId::kRint, OpId::kCeil, OpId::kFloor, OpId::kSign, OpId::kSigmoid, OpId::kRelu, OpId::kAbs, OpId::kNegative,
      OpId::kClip, OpId::kWhere, OpId::kAddN, OpId::kActivation, OpId::kActivationBackward, OpId::kLeakyReLU,
      OpId::kLeakyReLUBackward, OpId::kDropout, OpId::kSoftmax, OpId::kLogSoftmax, OpId::kSoftmaxBackward,
      OpId::kLogSoftmaxBackward, OpId::kSoftmaxCrossEntropy, OpId::kSoftmaxCrossEntropyBackward, OpId::kSum,
      OpId::kMean, OpId::kMax, OpId::kMin, OpId::kProd, OpId::kNorm, OpId::kArgmax, OpId::kArgmin,
  };
  for (OpId id : native) {
    ASSERT_TRUE(has_kernel(id, DeviceKind::kCUDA)) << op_def(id).name;
    EXPECT_EQ(half_support(id, DeviceKind::kCUDA), HalfSupport::kAny) << op_def(id).name << " is widened on cuda";
  }
  // cuDNN's (absent from builds without cuDNN).
  for (OpId id : {OpId::kConvolution, OpId::kConvAct, OpId::kPooling})
    if (has_kernel(id, DeviceKind::kCUDA))
      EXPECT_EQ(half_support(id, DeviceKind::kCUDA), HalfSupport::kAny) << op_def(id).name << " is widened on cuda";
}

// The table itself is valid (attributes parse, shapes infer, the CPU runs
// it), checked on every machine so a broken case is not first found on a GPU.
TEST(Cases, EveryCaseRunsOnTheCpu) {
  std::mt19937 rng(7);
  for (const Case& c : cases()) {
    std::vector<NDArray> host_inputs;
    for (const InputSpec& s : c.inputs) host_inputs.push_back(make_input(s, rng));
    try {
      for (NDArray& o : run_case(c, host_inputs, Device::cpu(0))) o.wait_to_read();
    } catch (const std::exception& e) {
      ADD_FAILURE() << describe(c) << ": " << e.what();
    }
  }
}

TEST(OpParity, EveryOpMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  std::set<std::string> no_kernel;
  int compared = 0;
  std::mt19937 rng(2024);
  for (const Case& c : cases()) {
    const OpDef& def = *find_op(c.op);
    if (!has_kernel(def.id, DeviceKind::kCUDA)) {
      if (!cpu_only().count(std::string(def.name))) no_kernel.insert(c.op);
      continue;
    }
    std::vector<NDArray> host_inputs;
    for (const InputSpec& s : c.inputs) host_inputs.push_back(make_input(s, rng));
    std::vector<NDArray> want, got;
    try {
      want = run_case(c, host_inputs, Device::cpu(0));
      got = run_case(c, host_inputs, gpu);
      for (NDArray& g : got) g.wait_to_read();
    } catch (const std::exception& e) {
      ADD_FAILURE() << describe(c) << ": " << e.what();
      continue;
    }
    ++compared;
    ASSERT_EQ(want.size(), got.size()) << describe(c);
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(want[k].shape(), got[k].shape()) << describe(c) << " output " << k;
      EXPECT_EQ(want[k].dtype(), got[k].dtype()) << describe(c) << " output " << k;
      std::vector<double> w = want[k].to_vector<double>(), g = got[k].to_vector<double>();
      if (w.size() != g.size()) continue;
      int reported = 0;
      for (size_t i = 0; i < w.size() && reported < 3; ++i) {
        bool same_nan = std::isnan(w[i]) && std::isnan(g[i]);
        if (!same_nan && !(std::abs(w[i] - g[i]) <= c.atol + c.rtol * std::abs(w[i]))) {
          ADD_FAILURE() << describe(c) << " output " << k << " element " << i << ": cpu " << w[i] << ", cuda "
                        << g[i] << " (rtol " << c.rtol << ", atol " << c.atol << ")";
          ++reported;
        }
      }
    }
  }
  std::cout << "[ parity ] " << compared << " cases compared on " << gpu.to_string() << "\n";
  EXPECT_TRUE(no_kernel.empty()) << no_kernel.size() << " ops with a CPU kernel have no CUDA kernel: "
                                 << fmt::format("{}", fmt::join(no_kernel, ", "));
}

// Every case in bfloat16 and float16 on the GPU against the same on the CPU
// (floating inputs rounded to the 16-bit type, except those the op keeps in
// float32): tensor-core products, the widening adaptor and the kernels that
// take 16-bit arrays. Tolerance: two roundings of the output, relative to
// the element and the output's largest magnitude, plus the case's own.
TEST(OpParity, EveryOpIn16BitFloatsMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  for (DType low : {DType::kBfloat16, DType::kFloat16}) {
    int compared = 0;
    std::mt19937 rng(99);
    for (const Case& c : cases()) {
      const OpDef& def = *find_op(c.op);
      std::vector<NDArray> inputs;
      for (const InputSpec& s : c.inputs) inputs.push_back(make_input(s, rng));
      if (!has_kernel(def.id, DeviceKind::kCUDA) || def.id == OpId::kFusedElemwise) continue;
      bool any_float = false;
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!is_floating(inputs[i].dtype()) || def.keeps_float32(i)) continue;
        inputs[i] = inputs[i].astype(low);
        any_float = true;
      }
      if (!any_float) continue;
      Case narrow = c;
      if (def.id == OpId::kEmbedding) narrow.attrs["dtype"] = std::string(dtype_name(low));
      std::vector<NDArray> want, got;
      try {
        want = run_case(narrow, inputs, Device::cpu(0));
      } catch (const std::exception&) {
        continue;  // not a 16-bit op on the CPU either (optimizer updates)
      }
      try {
        got = run_case(narrow, inputs, gpu);
        for (NDArray& g : got) g.wait_to_read();
      } catch (const std::exception& e) {
        ADD_FAILURE() << describe(c) << " in " << dtype_name(low) << ": " << e.what();
        continue;
      }
      ++compared;
      for (size_t k = 0; k < want.size() && k < got.size(); ++k)
        EXPECT_EQ(want[k].dtype(), got[k].dtype()) << describe(c) << " output " << k;
      expect_close_16bit(c, low, want, got, "cpu", "cuda");
    }
    std::cout << "[ parity ] " << compared << " " << dtype_name(low) << " cases compared on " << gpu.to_string()
              << "\n";
  }
}

}  // namespace
}  // namespace kiln
