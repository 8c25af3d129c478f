// The generated fused kernels' source (backends/cuda/fused_codegen.h): every
// opcode, dtype, input kind and access mode compiles with NVRTC for sm_90.
// No GPU needed (NVRTC compiles offline); skips with one line when Kiln was
// built without NVRTC.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "backends/cuda/fused_codegen.h"
#include "backends/cuda/fused_nvrtc.h"
#include "ir/ops/elemwise_math.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

// One program over inputs f, s, c, r with every opcode on a mix of them and
// literals (NaN and infinity among them).
FusedProgram every_opcode_program() {
  FusedProgram p;
  p.inputs = {FusedInputKind::kFull, FusedInputKind::kScalar, FusedInputKind::kChannel, FusedInputKind::kRow};
  const float literals[] = {0.5f, -2.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()};
  int j = 0;
#define KILN_X(id, name, arity, fn)                                                           \
  {                                                                                           \
    FusedInstr ins{FusedOpcode::k##id, {}};                                                   \
    for (int q = 0; q < (arity); ++q) {                                                       \
      int pick = (j + q) % 6;                                                                 \
      ins.args[static_cast<size_t>(q)] = pick < 4   ? FusedOperand{.value = pick}             \
                                         : pick < 5 ? FusedOperand{.value = p.num_values() - 1} \
                                                    : FusedOperand{.literal = literals[j % 4]}; \
    }                                                                                         \
    p.instrs.push_back(ins);                                                                  \
    ++j;                                                                                      \
  }
  KILN_FUSED_OPCODES(KILN_X)
#undef KILN_X
  // Every instruction's value is an output.
  for (int v = p.num_values() - 1; v >= static_cast<int>(p.inputs.size()); --v) p.outputs.push_back(v);
  p.validate();
  return p;
}

std::string compile_or_skip_reason(const std::string& source, const std::string& what) {
  try {
    cuda::nvrtc_compile_cubin(source, 9, 0, what);
    return "";
  } catch (const NotSupported& e) {
    return e.what();
  }
}

TEST(FusedCodegen, EveryOpcodeDtypeInputKindAndAccessModeCompilesForSm90) {
  const FusedProgram p = every_opcode_program();
  const std::string text = p.to_string();
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBfloat16}) {
    for (bool vector : {false, true}) {
      for (int mode = 0; mode < (vector ? 4 : 2); ++mode) {
        cuda::FusedSignature sig{
            .program = text, .dtype = dtype, .vector = vector, .index64 = mode % 2 == 1, .channel_grouped = mode >= 2};
        std::string source = cuda::fused_kernel_source(p, sig);
        // The math is pasted from the one source, not restated.
        EXPECT_NE(source.find(math::kFusedMathSource), std::string::npos);
        std::string skip;
        try {
          skip = compile_or_skip_reason(source, text);
        } catch (const std::exception& e) {
          ADD_FAILURE() << sig.key() << ": " << e.what() << "\n" << source;
          continue;
        }
        if (!skip.empty()) GTEST_SKIP() << skip;
      }
    }
  }
}

TEST(FusedCodegen, CompileErrorsNameTheProgramAndCarryNvrtcsLog) {
  std::string msg;
  try {
    cuda::nvrtc_compile_cubin("extern \"C\" __global__ void kiln_fused() { undeclared_thing(); }", 9, 0,
                              "in=f;%1=exp(%0);out=%1");
  } catch (const NotSupported& e) {
    GTEST_SKIP() << e.what();
  } catch (const DeviceError& e) {
    msg = e.what();
  }
  EXPECT_CONTAINS(msg, "in=f;%1=exp(%0);out=%1");
  EXPECT_CONTAINS(msg, "sm_90");
  EXPECT_CONTAINS(msg, "undeclared_thing");
}

TEST(FusedCodegen, TooManyOperandsIsNotSupported) {
  FusedProgram p;
  for (int k = 0; k <= cuda::kFusedKernelMaxOperands; ++k) p.inputs.push_back(FusedInputKind::kFull);
  p.instrs.push_back({FusedOpcode::kAdd, {FusedOperand{.value = 0}, FusedOperand{.value = 1}, {}}});
  p.outputs = {p.num_values() - 1};
  cuda::FusedSignature sig{.program = p.to_string()};
  EXPECT_THROW(cuda::fused_kernel_source(p, sig), NotSupported);
}

// The kernels' 32-bit division: (umulhi(i, mul) + i) >> shift == i / d for
// i, d below 2^31.
TEST(FusedCodegen, FastDivisionMatchesDivision) {
  auto umulhi = [](uint32_t a, uint32_t b) { return static_cast<uint32_t>((uint64_t{a} * b) >> 32); };
  std::mt19937 rng(5);
  std::vector<uint32_t> divisors = {1, 2, 3, 5, 7, 9, 64, 100, 1000, 4095, 65536, 65537, 1u << 30, (1u << 31) - 1};
  for (int k = 0; k < 200; ++k) divisors.push_back(1 + rng() % ((1u << 31) - 1));
  for (int k = 0; k < 50; ++k) divisors.push_back(1 + rng() % 4096);
  for (uint32_t d : divisors) {
    cuda::FastDiv f = cuda::fused_fast_div(d);
    std::vector<uint32_t> values = {0, 1, d - 1, d, d + 1, (1u << 31) - 1, (1u << 31) - 2};
    for (int k = 0; k < 200; ++k) values.push_back(rng() % (1u << 31));
    for (uint32_t i : values) {
      if (i >= (1u << 31)) continue;
      ASSERT_EQ((umulhi(i, f.mul) + i) >> f.shift, i / d) << "i " << i << " d " << d;
    }
  }
}

}  // namespace
}  // namespace kiln
