// The one scalar source of the fused opcodes (ir/ops/elemwise_math.h) against
// the CPU's implementations that do not call it: the interpreter's
// eight-lane loops (backends/cpu/fused_interpret.cc) and the LLVM JIT (when
// built). Every opcode on every pair (triple for where) of edge values: NaN,
// +-inf, +-0, subnormals, the smallest normal, large, negative, near exp's
// overflow. Bit for bit (any NaN matching any NaN) where no libm function is
// involved; where one is (exp, log, tanh, sigmoid, softrelu: Cephes
// polynomials against libm), within kLibmUlps = 1 ulp. Away from these
// values the polynomials' documented error is larger (backends/cpu/
// elemwise_math.h: up to 3 ulp for sigmoid); fused_kernel_test covers random
// data at 1e-6 relative.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/fused.h"
#include "ir/ops/elemwise_math.h"
#include "ir/ops/fused.h"

namespace kiln {
namespace {

constexpr int64_t kLibmUlps = 1;

std::vector<float> edge_values() {
  const float inf = std::numeric_limits<float>::infinity();
  return {std::numeric_limits<float>::quiet_NaN(),
          inf,
          -inf,
          0.0f,
          -0.0f,
          1e-40f,
          -1e-40f,
          std::numeric_limits<float>::min(),
          std::numeric_limits<float>::denorm_min(),
          1e30f,
          -1e30f,
          std::numeric_limits<float>::max(),
          88.5f,
          -88.5f,
          100.0f,
          -104.5f,
          1.0f,
          -1.0f,
          0.5f,
          -0.5f,
          3.0f,
          -3.0f,
          1e-7f,
          0.625f,
          20.0f,
          -20.0f};
}

bool uses_libm(FusedOpcode op) {
  using O = FusedOpcode;
  return op == O::kExp || op == O::kLog || op == O::kTanh || op == O::kSigmoid || op == O::kSoftrelu;
}

// Distance in representable floats (same sign: difference of bit patterns).
int64_t ulps(float a, float b) {
  auto key = [](float v) {
    int32_t i = std::bit_cast<int32_t>(v);
    return i < 0 ? int64_t{std::numeric_limits<int32_t>::min()} - i : int64_t{i};
  };
  return std::abs(key(a) - key(b));
}

struct Inputs {
  std::vector<float> a, b, c;
};

// Every pair (arity 2) or triple (arity 3, on a smaller set) of edge values.
Inputs operands(int arity) {
  std::vector<float> e = edge_values();
  Inputs in;
  if (arity == 1) {
    in.a = e;
  } else if (arity == 2) {
    for (float x : e)
      for (float y : e) in.a.push_back(x), in.b.push_back(y);
  } else {
    std::vector<float> small = {std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f, 1.0f, -1e-40f, 2.5f};
    for (float x : small)
      for (float y : e)
        for (float z : small) in.a.push_back(x), in.b.push_back(y), in.c.push_back(z);
  }
  return in;
}

// Runs the one-instruction program of `op` over full inputs with `loop`
// (nullptr: the interpreter).
std::vector<float> run(FusedOpcode op, const Inputs& in, cpu::FusedLoopFn loop, const FusedProgram& p) {
  const size_t n = in.a.size();
  std::vector<float> a = in.a, b = in.b, c = in.c, out(n, -12345.0f);
  std::vector<void*> bufs = {a.data()};
  if (fused_opcode_arity(op) >= 2) bufs.push_back(b.data());
  if (fused_opcode_arity(op) >= 3) bufs.push_back(c.data());
  bufs.push_back(out.data());
  if (loop != nullptr)
    loop(bufs.data(), 0, static_cast<int64_t>(n));
  else
    cpu::fused_interpret(p, bufs.data(), 0, static_cast<int64_t>(n));
  return out;
}

FusedProgram one_instruction(FusedOpcode op) {
  const int arity = fused_opcode_arity(op);
  FusedProgram p;
  FusedInstr ins{op, {}};
  for (int q = 0; q < arity; ++q) {
    p.inputs.push_back(FusedInputKind::kFull);
    ins.args[static_cast<size_t>(q)] = FusedOperand{.value = q};
  }
  p.instrs.push_back(ins);
  p.outputs = {arity};
  return p;
}

void compare(FusedOpcode op, const Inputs& in, const std::vector<float>& got, const std::string& who) {
  int reported = 0;
  for (size_t i = 0; i < got.size() && reported < 5; ++i) {
    float b = in.b.empty() ? 0.0f : in.b[i], c = in.c.empty() ? 0.0f : in.c[i];
    float want = math::fused_eval(op, in.a[i], b, c);
    float g = got[i];
    bool ok;
    if (std::isnan(want) || std::isnan(g))
      ok = std::isnan(want) && std::isnan(g);
    else if (!uses_libm(op))
      ok = std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(g);
    else
      ok = ulps(want, g) <= kLibmUlps;
    if (!ok) {
      ADD_FAILURE() << who << " " << fused_opcode_name(op) << "(" << in.a[i] << ", " << b << ", " << c
                    << "): " << g << " (bits " << std::hex << std::bit_cast<uint32_t>(g) << "), shared math " << want
                    << " (bits " << std::bit_cast<uint32_t>(want) << std::dec << ", " << ulps(want, g) << " ulp)";
      ++reported;
    }
  }
}

TEST(FusedMath, InterpreterAgreesWithTheSharedScalarMathOnEdgeValues) {
#define KILN_X(id, name, arity, fn)                                  \
  {                                                                  \
    FusedOpcode op = FusedOpcode::k##id;                             \
    Inputs in = operands(arity);                                     \
    compare(op, in, run(op, in, nullptr, one_instruction(op)), "interpreter"); \
  }
  KILN_FUSED_OPCODES(KILN_X)
#undef KILN_X
}

TEST(FusedMath, JitAgreesWithTheSharedScalarMathOnEdgeValues) {
  if (!cpu::fused_jit_enabled()) GTEST_SKIP() << "the LLVM JIT is not built or KILN_JIT=0";
#define KILN_X(id, name, arity, fn)                                                 \
  {                                                                                 \
    FusedOpcode op = FusedOpcode::k##id;                                            \
    Inputs in = operands(arity);                                                    \
    FusedProgramRef ref = FusedProgramRef::make(one_instruction(op));               \
    cpu::FusedLoopFn loop = cpu::fused_loop(ref);                                   \
    ASSERT_NE(loop, nullptr) << name;                                               \
    compare(op, in, run(op, in, loop, ref.program()), "JIT");                       \
  }
  KILN_FUSED_OPCODES(KILN_X)
#undef KILN_X
}

// The double overloads (constant folding of float64 nodes) keep the same
// semantics on the values where they are defined exactly.
TEST(FusedMath, DoubleFormsKeepTheDocumentedSemantics) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(math::op_max(nan, 1.0, 0.0)));
  EXPECT_TRUE(std::isnan(math::op_max(1.0, nan, 0.0)));
  EXPECT_TRUE(std::isnan(math::op_min(nan, 1.0, 0.0)));
  EXPECT_TRUE(std::isnan(math::op_min(1.0, nan, 0.0)));
  EXPECT_EQ(math::op_relu(nan, 0.0, 0.0), 0.0);
  EXPECT_EQ(math::op_where(nan, 2.0, 3.0), 2.0);
  EXPECT_EQ(math::op_where(0.0, 2.0, 3.0), 3.0);
  EXPECT_EQ(math::op_gt(2.0, 1.0, 0.0), 1.0);
  EXPECT_EQ(math::op_le(2.0, 1.0, 0.0), 0.0);
  EXPECT_EQ(math::op_sigmoid(-1000.0, 0.0, 0.0), 0.0);
  EXPECT_EQ(math::op_sigmoid(1000.0, 0.0, 0.0), 1.0);
  EXPECT_EQ(math::op_softrelu(1000.0, 0.0, 0.0), 1000.0);
  EXPECT_EQ(math::op_softrelu(1000.0f, 0.0f, 0.0f), 1000.0f);
}

}  // namespace
}  // namespace kiln
