// The interpreter of fused programs (backends/cpu/fused.h): blocks of 512
// positions, one loop of eight-lane vectors per instruction. A value that is
// the same at every position (a literal, a scalar or channel input, or an
// instruction over only such values) is kept as one float.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/elemwise_math.h"
#include "backends/cpu/fused.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kBlock = 512;

VecF abs_vec(VecF a) { return reinterpret_cast<VecF>(reinterpret_cast<VecI>(a) & 0x7fffffff); }
VecF select(VecI mask, VecF a, VecF b) { return mask ? a : b; }
VecF bool_vec(VecI mask) { return mask ? splat(1.0f) : splat(0.0f); }

// One instruction on eight lanes: the scalar math of ir/ops/elemwise_math.h on
// vectors, with Cephes polynomials (elemwise_math.h here) for exp, log, tanh
// and sigmoid.
template <FusedOpcode kOp>
inline VecF apply(VecF a, VecF b, VecF c) {
  using O = FusedOpcode;
  if constexpr (kOp == O::kAdd) return a + b;
  if constexpr (kOp == O::kSub) return a - b;
  if constexpr (kOp == O::kMul) return a * b;
  if constexpr (kOp == O::kDiv) return a / b;
  if constexpr (kOp == O::kPow) {
    VecF r;
    for (int l = 0; l < kVecWidth; ++l) r[l] = std::pow(a[l], b[l]);
    return r;
  }
  if constexpr (kOp == O::kMax) return select((a > b) | (a != a), a, b);
  if constexpr (kOp == O::kMin) return select((a < b) | (a != a), a, b);
  if constexpr (kOp == O::kEq) return bool_vec(a == b);
  if constexpr (kOp == O::kNe) return bool_vec(a != b);
  if constexpr (kOp == O::kGt) return bool_vec(a > b);
  if constexpr (kOp == O::kGe) return bool_vec(a >= b);
  if constexpr (kOp == O::kLt) return bool_vec(a < b);
  if constexpr (kOp == O::kLe) return bool_vec(a <= b);
  if constexpr (kOp == O::kWhere) return select(a != 0.0f, b, c);
  if constexpr (kOp == O::kNeg) return -a;
  if constexpr (kOp == O::kAbs) return abs_vec(a);
  if constexpr (kOp == O::kSquare) return a * a;
  if constexpr (kOp == O::kSqrt) return vec_sqrt(a);
  if constexpr (kOp == O::kExp) return vec_exp(a);
  if constexpr (kOp == O::kLog) return vec_log(a);
  if constexpr (kOp == O::kTanh) return vec_tanh(a);
  if constexpr (kOp == O::kSigmoid) return vec_sigmoid(a);
  if constexpr (kOp == O::kRelu) return select(a > 0.0f, a, splat(0.0f));
  if constexpr (kOp == O::kSoftrelu) {
    // max(x, 0) + log1p(exp(-|x|)); log1p(e) = log(1 + e) * e / ((1 + e) - 1)
    // keeps log1p's accuracy for small e.
    VecF e = vec_exp(-abs_vec(a));
    VecF u = 1.0f + e;
    VecF d = u - 1.0f;
    VecF l = select(d == 0.0f, e, vec_log(u) * (e / d));
    return select(a < 0.0f, splat(0.0f), a) + l;
  }
  if constexpr (kOp == O::kSoftsign) return a / (1.0f + abs_vec(a));
}

// An operand within a block: `n` floats at p, or one value everywhere.
struct Slot {
  const float* p = nullptr;
  float s = 0;
  bool uniform = true;
  VecF at(int64_t i) const { return uniform ? splat(s) : load_vec(p + i); }
};

template <FusedOpcode kOp>
Slot run_instr(const Slot& a, const Slot& b, const Slot& c, float* dst, int64_t n) {
  // Uniform operands: the shared scalar math (ir/ops/elemwise_math.h), which the
  // vector forms above agree with (tests/runtime/fused_math_test.cc).
  if (a.uniform && b.uniform && c.uniform) return {nullptr, math::fused_eval(kOp, a.s, b.s, c.s), true};
  // Three specializations cover the common cases without a per-lane branch.
  if (!a.uniform && b.uniform) {
    const VecF bv = splat(b.s), cv = c.uniform ? splat(c.s) : VecF{};
    if (c.uniform) {
      for (int64_t i = 0; i < n; i += kVecWidth) store_vec(dst + i, apply<kOp>(load_vec(a.p + i), bv, cv));
      return {dst, 0, false};
    }
  }
  if (!a.uniform && !b.uniform && c.uniform) {
    const VecF cv = splat(c.s);
    for (int64_t i = 0; i < n; i += kVecWidth) store_vec(dst + i, apply<kOp>(load_vec(a.p + i), load_vec(b.p + i), cv));
    return {dst, 0, false};
  }
  for (int64_t i = 0; i < n; i += kVecWidth) store_vec(dst + i, apply<kOp>(a.at(i), b.at(i), c.at(i)));
  return {dst, 0, false};
}

Slot run_instr(FusedOpcode op, const Slot& a, const Slot& b, const Slot& c, float* dst, int64_t n) {
  switch (op) {
#define KILN_X(id, name, arity, fn) \
  case FusedOpcode::k##id:      \
    return run_instr<FusedOpcode::k##id>(a, b, c, dst, n);
    KILN_FUSED_OPCODES(KILN_X)
#undef KILN_X
  }
  return {};
}

}  // namespace

void fused_interpret(const FusedProgram& p, void** bufs, int64_t begin, int64_t end) {
  const size_t k = p.inputs.size();
  const size_t num_values = static_cast<size_t>(p.num_values());
  // Scratch per value (inputs: tails copied with padding), reused per thread.
  thread_local std::vector<float> scratch;
  if (scratch.size() < num_values * kBlock) scratch.resize(num_values * kBlock);
  thread_local std::vector<Slot> slots;
  if (slots.size() < num_values) slots.resize(num_values);
  for (int64_t blk = begin; blk < end; blk += kBlock) {
    const int64_t len = std::min(kBlock, end - blk);
    const int64_t padded = (len + kVecWidth - 1) / kVecWidth * kVecWidth;
    for (size_t j = 0; j < k; ++j) {
      const float* src = static_cast<const float*>(bufs[j]);
      if (p.inputs[j] == FusedInputKind::kScalar || p.inputs[j] == FusedInputKind::kChannel) {
        slots[j] = {nullptr, src[0], true};
      } else if (len == padded) {
        slots[j] = {src + blk, 0, false};
      } else {
        float* s = scratch.data() + j * kBlock;
        std::memcpy(s, src + blk, static_cast<size_t>(len) * sizeof(float));
        std::memset(s + len, 0, static_cast<size_t>(padded - len) * sizeof(float));
        slots[j] = {s, 0, false};
      }
    }
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      const FusedInstr& ins = p.instrs[i];
      Slot args[3];
      const int arity = std::min(fused_opcode_arity(ins.op), 3);  // (GCC cannot see the bound)
      for (int a = 0; a < arity; ++a) {
        const FusedOperand& o = ins.args[static_cast<size_t>(a)];
        args[a] = o.is_value() ? slots[static_cast<size_t>(o.value)] : Slot{nullptr, o.literal, true};
      }
      slots[k + i] = run_instr(ins.op, args[0], args[1], args[2], scratch.data() + (k + i) * kBlock, padded);
    }
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      float* dst = static_cast<float*>(bufs[k + o]) + blk;
      const Slot& s = slots[static_cast<size_t>(p.outputs[o])];
      if (s.uniform)
        std::fill(dst, dst + len, s.s);
      else
        std::memcpy(dst, s.p, static_cast<size_t>(len) * sizeof(float));
    }
  }
}

}  // namespace kiln::cpu
