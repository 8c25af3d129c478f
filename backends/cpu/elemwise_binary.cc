// CPU kernels of the binary elemwise ops: elemwise_*, broadcast_*, the
// scalar ops (a binary op with a one-element operand) and where.
#include <cmath>
#include <cstring>

#include "backends/cpu/elemwise_kernels.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/elemwise_math.h"

namespace kiln {
namespace {

// ---- functors on compute-type values (see elemwise_kernels.h)

struct AddOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return cpu::wrap_add(a, b);
    else
      return a + b;
  }
};

struct SubOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return cpu::wrap_sub(a, b);
    else
      return a - b;
  }
};

struct MulOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return cpu::wrap_mul(a, b);
    else
      return a * b;
  }
};

// Integers: truncating division; x / 0 is 0 and MIN / -1 wraps (no traps).
struct DivOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<C>) {
        if (b == -1) return cpu::wrap_sub(C{0}, a);
      }
      return static_cast<C>(a / b);
    } else {
      return a / b;
    }
  }
};

// Integers: exact with wraparound; negative exponents give 1 / a^-b truncated.
struct PowerOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      if constexpr (std::is_signed_v<C>) {
        if (b < 0) return a == 1 ? C{1} : a == -1 ? ((b & 1) ? C{-1} : C{1}) : C{0};
      }
      C result = 1;
      for (; b != 0; b = static_cast<C>(b >> 1)) {
        if (b & 1) result = cpu::wrap_mul(result, a);
        a = cpu::wrap_mul(a, a);
      }
      return result;
    } else {
      return std::pow(a, b);
    }
  }
};

// NaN in either operand gives NaN (NumPy's maximum/minimum).
struct MaximumOp {
  template <typename C>
  C operator()(C a, C b) const {
    return ((a > b) | (a != a)) ? a : b;
  }
};

struct MinimumOp {
  template <typename C>
  C operator()(C a, C b) const {
    return ((a < b) | (a != a)) ? a : b;
  }
};

// mod (the divisor's sign) and fmod (the dividend's sign): the shared
// scalar forms (ir/ops/elemwise_math.h); an integer divisor of 0 gives 0.
struct ModOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return math::int_mod(a, b);
    else
      return math::op_mod(a, b);
  }
};

struct FmodOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return math::int_fmod(a, b);
    else
      return math::op_fmod(a, b);
  }
};

#define KILN_COMPARISON_OP(Name, expr) \
  struct Name {                        \
    template <typename C>              \
    C operator()(C a, C b) const {     \
      return (expr) ? C{1} : C{0};     \
    }                                  \
  }
KILN_COMPARISON_OP(EqualOp, a == b);
KILN_COMPARISON_OP(NotEqualOp, a != b);
KILN_COMPARISON_OP(GreaterOp, a > b);
KILN_COMPARISON_OP(GreaterEqualOp, a >= b);
KILN_COMPARISON_OP(LesserOp, a < b);
KILN_COMPARISON_OP(LesserEqualOp, a <= b);
#undef KILN_COMPARISON_OP

// ---- kernels

// elemwise_* and broadcast_*: out = op(lhs, rhs).
template <typename Op>
void binary(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  cpu::dispatch_numeric(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    cpu::binary_kernel<T>(ctx, in[0], in[1], out[0], Op{});
  });
}

// broadcast_mod and broadcast_fmod: the numeric dtypes and uint64.
template <typename Op>
void binary_mod(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (in[0].dtype == DType::kUint64) return cpu::binary_kernel<uint64_t>(ctx, in[0], in[1], out[0], Op{});
  binary<Op>(ctx, in, out);
}

// _<op>_scalar: out = op(x, scalar), or op(scalar, x) when kReversed.
template <typename Op, bool kReversed = false>
void scalar(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const double value = ctx.attrs.as<ScalarAttrs>().scalar;
  cpu::dispatch_numeric(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<Op, PowerOp> && !kReversed) {
      if (value == 2) return cpu::binary_kernel<T>(ctx, in[0], in[0], out[0], MulOp{});  // x ** 2: no pow call
    }
    T s = cpu::saturate_cast<T>(value);
    // The input has the output's shape: unless the two overlap partially
    // (views of one chunk at different offsets), a small one is one span,
    // without binary_kernel's overlap copies and broadcast checks.
    const int64_t n = out[0].size();
    const T* px = in[0].ptr<const T>();
    T* po = out[0].ptr<T>();
    if (n < cpu::kDefaultGrain && (px == po || px + n <= po || po + n <= px)) {
      if constexpr (kReversed)
        cpu::binary_span<false, true>(&s, px, po, n, Op{});
      else
        cpu::binary_span<true, false>(px, &s, po, n, Op{});
      return;
    }
    TensorView sv{&s, Shape{}, in[0].dtype};
    if constexpr (kReversed)
      cpu::binary_kernel<T>(ctx, sv, in[0], out[0], Op{});
    else
      cpu::binary_kernel<T>(ctx, in[0], sv, out[0], Op{});
  });
}

// where: only nonzero-ness of the condition and the bytes of x and y matter,
// so the kernel is instantiated per element size: a condition element is
// true when (bits & mask) != 0, where the mask drops a float's sign bit.
template <typename CondBits, typename Value>
void where_loop(const KernelContext& ctx, const TensorView& cond, const TensorView& x, const TensorView& y,
                const TensorView& out, CondBits mask) {
  const auto* pc = static_cast<const CondBits*>(cond.data);
  const auto* px = static_cast<const Value*>(x.data);
  const auto* py = static_cast<const Value*>(y.data);
  auto* po = static_cast<Value*>(out.data);
  const int64_t n = out.size();
  const cpu::BroadcastPlan<3> plan(out.shape, {cond.shape, x.shape, y.shape});
  const bool all_contiguous = plan.inner_contiguous(0) && plan.inner_contiguous(1) && plan.inner_contiguous(2);
  const int64_t sc = plan.inner_contiguous(0), sx = plan.inner_contiguous(1), sy = plan.inner_contiguous(2);
  cpu::parallel_for(ctx.run.num_threads, n, [&](int64_t s, int64_t e) {
    plan.for_each_row(s, e, [&](const std::array<int64_t, 3>& off, int64_t pos, int64_t len) {
      const CondBits* c = pc + off[0];
      const Value* a = px + off[1];
      const Value* b = py + off[2];
      Value* z = po + pos;
      if (all_contiguous) {
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) z[i] = (c[i] & mask) != 0 ? a[i] : b[i];
      } else {
        for (int64_t i = 0; i < len; ++i) z[i] = (c[i * sc] & mask) != 0 ? a[i * sx] : b[i * sy];
      }
    });
  });
}

template <typename Fn>
void dispatch_bits(size_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1:
      return fn(uint8_t{});
    case 2:
      return fn(uint16_t{});
    case 4:
      return fn(uint32_t{});
    case 8:
      return fn(uint64_t{});
  }
  throw InternalError(fmt::format("internal error: where: element size {}", bytes));
}

void where(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (out[0].size() == 0) return;
  std::unique_ptr<char[]> scratch[3];
  TensorView cond = cpu::readable(in[0], out[0], scratch[0]);
  TensorView x = cpu::readable(in[1], out[0], scratch[1]);
  TensorView y = cpu::readable(in[2], out[0], scratch[2]);
  const size_t cond_bytes = dtype_size(cond.dtype);
  dispatch_bits(cond_bytes, [&](auto cond_tag) {
    using CondBits = decltype(cond_tag);
    CondBits mask = static_cast<CondBits>(~CondBits{0});
    if (is_floating(cond.dtype)) mask = static_cast<CondBits>(mask >> 1);  // -0.0 is false
    dispatch_bits(dtype_size(x.dtype),
                  [&](auto value_tag) { where_loop<CondBits, decltype(value_tag)>(ctx, cond, x, y, out[0], mask); });
  });
}

}  // namespace

void register_cpu_elemwise_binary_kernels() {
  constexpr DeviceKind kCPU = DeviceKind::kCPU;
  register_kernel(OpId::kElemwiseAdd, kCPU, binary<AddOp>, HalfSupport::kAny);
  register_kernel(OpId::kElemwiseSub, kCPU, binary<SubOp>, HalfSupport::kAny);
  register_kernel(OpId::kElemwiseMul, kCPU, binary<MulOp>, HalfSupport::kAny);
  register_kernel(OpId::kElemwiseDiv, kCPU, binary<DivOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastAdd, kCPU, binary<AddOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastSub, kCPU, binary<SubOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastMul, kCPU, binary<MulOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastDiv, kCPU, binary<DivOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastPower, kCPU, binary<PowerOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastMaximum, kCPU, binary<MaximumOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastMinimum, kCPU, binary<MinimumOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastMod, kCPU, binary_mod<ModOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastFmod, kCPU, binary_mod<FmodOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastEqual, kCPU, binary<EqualOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastNotEqual, kCPU, binary<NotEqualOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastGreater, kCPU, binary<GreaterOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastGreaterEqual, kCPU, binary<GreaterEqualOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastLesser, kCPU, binary<LesserOp>, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastLesserEqual, kCPU, binary<LesserEqualOp>, HalfSupport::kAny);

  register_kernel(OpId::kPlusScalar, kCPU, scalar<AddOp>, HalfSupport::kAny);
  register_kernel(OpId::kMinusScalar, kCPU, scalar<SubOp>, HalfSupport::kAny);
  register_kernel(OpId::kRMinusScalar, kCPU, scalar<SubOp, true>, HalfSupport::kAny);
  register_kernel(OpId::kMulScalar, kCPU, scalar<MulOp>, HalfSupport::kAny);
  register_kernel(OpId::kDivScalar, kCPU, scalar<DivOp>, HalfSupport::kAny);
  register_kernel(OpId::kRDivScalar, kCPU, scalar<DivOp, true>, HalfSupport::kAny);
  register_kernel(OpId::kPowerScalar, kCPU, scalar<PowerOp>, HalfSupport::kAny);
  register_kernel(OpId::kRPowerScalar, kCPU, scalar<PowerOp, true>, HalfSupport::kAny);
  register_kernel(OpId::kMaximumScalar, kCPU, scalar<MaximumOp>, HalfSupport::kAny);
  register_kernel(OpId::kMinimumScalar, kCPU, scalar<MinimumOp>, HalfSupport::kAny);
  register_kernel(OpId::kEqualScalar, kCPU, scalar<EqualOp>, HalfSupport::kAny);
  register_kernel(OpId::kNotEqualScalar, kCPU, scalar<NotEqualOp>, HalfSupport::kAny);
  register_kernel(OpId::kGreaterScalar, kCPU, scalar<GreaterOp>, HalfSupport::kAny);
  register_kernel(OpId::kGreaterEqualScalar, kCPU, scalar<GreaterEqualOp>, HalfSupport::kAny);
  register_kernel(OpId::kLesserScalar, kCPU, scalar<LesserOp>, HalfSupport::kAny);
  register_kernel(OpId::kLesserEqualScalar, kCPU, scalar<LesserEqualOp>, HalfSupport::kAny);

  register_kernel(OpId::kWhere, kCPU, where, HalfSupport::kAny);
}

}  // namespace kiln
