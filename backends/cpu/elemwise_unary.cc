// CPU kernels of the unary elemwise ops, clip, _copy and Cast.
#include <cmath>
#include <cstring>

#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/elemwise_math.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/elemwise_math.h"

namespace kiln {
namespace {

using cpu::VecF;

// ---- functors on compute-type values; `vec` is the float32 form, eight lanes
// at a time. The scalar forms of the fused opcodes' functions are the shared
// ones (ir/ops/elemwise_math.h; float and double compute types).

struct ExpOp {
  template <typename C>
  C operator()(C a) const {
    return math::op_exp(a, C{}, C{});
  }
  static VecF vec(VecF v) { return cpu::vec_exp(v); }
};

struct LogOp {
  template <typename C>
  C operator()(C a) const {
    return math::op_log(a, C{}, C{});
  }
  static VecF vec(VecF v) { return cpu::vec_log(v); }
};

struct SqrtOp {
  template <typename C>
  C operator()(C a) const {
    return math::op_sqrt(a, C{}, C{});
  }
  static VecF vec(VecF v) { return cpu::vec_sqrt(v); }
};

struct TanhOp {
  template <typename C>
  C operator()(C a) const {
    return math::op_tanh(a, C{}, C{});
  }
  static VecF vec(VecF v) { return cpu::vec_tanh(v); }
};

struct ErfOp {  // libm's erf: no float32 vector form (the op is rare: ONNX graphs that spell GELU out)
  template <typename C>
  C operator()(C a) const {
    return std::erf(a);
  }
};

// The other floating-point functions of ir/ops/elemwise_math.h, scalar only.
#define KILN_MATH_UNARY_OP(Name, fn) \
  struct Name {                      \
    template <typename C>            \
    C operator()(C a) const {        \
      return math::fn(a);            \
    }                                \
  }
KILN_MATH_UNARY_OP(SinOp, op_sin);
KILN_MATH_UNARY_OP(CosOp, op_cos);
KILN_MATH_UNARY_OP(TanOp, op_tan);
KILN_MATH_UNARY_OP(ArcsinOp, op_arcsin);
KILN_MATH_UNARY_OP(ArccosOp, op_arccos);
KILN_MATH_UNARY_OP(ArctanOp, op_arctan);
KILN_MATH_UNARY_OP(SinhOp, op_sinh);
KILN_MATH_UNARY_OP(CoshOp, op_cosh);
KILN_MATH_UNARY_OP(ArcsinhOp, op_arcsinh);
KILN_MATH_UNARY_OP(ArccoshOp, op_arccosh);
KILN_MATH_UNARY_OP(ArctanhOp, op_arctanh);
KILN_MATH_UNARY_OP(RoundOp, op_round);
KILN_MATH_UNARY_OP(RintOp, op_rint);
KILN_MATH_UNARY_OP(CeilOp, op_ceil);
KILN_MATH_UNARY_OP(FloorOp, op_floor);
#undef KILN_MATH_UNARY_OP

struct SignOp {
  template <typename C>
  C operator()(C a) const {
    if constexpr (!std::is_integral_v<C>)
      return math::op_sign(a);
    else if constexpr (std::is_signed_v<C>)
      return a > 0 ? C{1} : (a < 0 ? C{-1} : C{0});
    else
      return a > 0 ? C{1} : C{0};
  }
};

struct SigmoidOp {
  template <typename C>
  C operator()(C a) const {
    return math::op_sigmoid(a, C{}, C{});
  }
  static VecF vec(VecF v) { return cpu::vec_sigmoid(v); }
};

struct SquareOp {
  template <typename C>
  C operator()(C a) const {
    if constexpr (std::is_integral_v<C>)
      return cpu::wrap_mul(a, a);
    else
      return a * a;
  }
};

struct ReluOp {
  template <typename C>
  C operator()(C a) const {
    return a > C{0} ? a : C{0};
  }
};

struct NegativeOp {
  template <typename C>
  C operator()(C a) const {
    if constexpr (std::is_integral_v<C>)
      return cpu::wrap_sub(C{0}, a);
    else
      return -a;
  }
};

struct AbsOp {
  template <typename C>
  C operator()(C a) const {
    if constexpr (std::is_unsigned_v<C>)
      return a;
    else if constexpr (std::is_integral_v<C>)
      return a < 0 ? cpu::wrap_sub(C{0}, a) : a;
    else
      return std::abs(a);
  }
};

// As NumPy: min(max(a, lo), hi), so lo > hi gives hi; NaN stays NaN.
template <typename C>
struct ClipOp {
  C lo, hi;
  C operator()(C a) const {
    C t = a < lo ? lo : a;
    return t > hi ? hi : t;
  }
};

// ---- loops

// y[i] = op(x[i]); y may be x.
template <typename T, typename Op>
void unary_span(const T* x, T* y, int64_t n, const Op& op) {
  if constexpr (std::is_same_v<T, float> && requires(VecF v) { op.vec(v); }) {
    cpu::vec_map(x, y, n, [&](VecF v) { return op.vec(v); });
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = cpu::store<T>(op(cpu::load(x[i])));
  }
}

template <typename T, typename Op>
void unary_kernel(const KernelContext& ctx, const TensorView& in, const TensorView& out, const Op& op) {
  const T* x = in.ptr<const T>();
  T* y = out.ptr<T>();
  cpu::parallel_for(ctx.run.num_threads, out.size(),
                    [&](int64_t s, int64_t e) { unary_span(x + s, y + s, e - s, op); });
}

template <typename Op>
void numeric_unary(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  cpu::dispatch_numeric(in[0].dtype, [&](auto tag) { unary_kernel<decltype(tag)>(ctx, in[0], out[0], Op{}); });
}

template <typename Op>
void floating_unary(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  cpu::dispatch_floating(in[0].dtype, [&](auto tag) { unary_kernel<decltype(tag)>(ctx, in[0], out[0], Op{}); });
}

void clip(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<ClipAttrs>();
  cpu::dispatch_numeric(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = cpu::compute_t<T>;
    ClipOp<C> op{cpu::load(cpu::saturate_cast<T>(a.a_min)), cpu::load(cpu::saturate_cast<T>(a.a_max))};
    unary_kernel<T>(ctx, in[0], out[0], op);
  });
}

void copy(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto* src = static_cast<const char*>(in[0].data);
  auto* dst = static_cast<char*>(out[0].data);
  const int64_t bytes = static_cast<int64_t>(out[0].bytes());
  if (src == dst || bytes == 0) return;
  if (src < dst + bytes && dst < src + bytes) {  // overlapping views of one chunk
    std::memmove(dst, src, static_cast<size_t>(bytes));
    return;
  }
  cpu::parallel_for(
      ctx.run.num_threads, bytes,
      [&](int64_t s, int64_t e) { std::memcpy(dst + s, src + s, static_cast<size_t>(e - s)); }, cpu::kDefaultGrain * 4);
}

// One element of Cast: halves go through float, anything to bool is `!= 0`.
template <typename O, typename I>
inline O convert(I v) {
  if constexpr (std::is_same_v<O, I>)
    return v;
  else if constexpr (cpu::kIsHalfType<I>)
    return convert<O>(cpu::load(v));
  else if constexpr (cpu::kIsHalfType<O>)
    return cpu::store<O>(static_cast<float>(v));
  else if constexpr (std::is_same_v<O, bool>)
    return v != I{0};
  else
    return static_cast<O>(v);
}

void cast(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (in[0].dtype == out[0].dtype) return copy(ctx, in, out);
  dispatch_dtype(in[0].dtype, [&](auto in_tag) {
    using I = decltype(in_tag);
    dispatch_dtype(out[0].dtype, [&](auto out_tag) {
      using O = decltype(out_tag);
      const I* x = in[0].ptr<const I>();
      O* y = out[0].ptr<O>();
      cpu::parallel_for(ctx.run.num_threads, out[0].size(), [&](int64_t s, int64_t e) {
#pragma omp simd
        for (int64_t i = s; i < e; ++i) y[i] = convert<O>(x[i]);
      });
    });
  });
}

}  // namespace

void register_cpu_elemwise_unary_kernels() {
  constexpr DeviceKind kCPU = DeviceKind::kCPU;
  register_kernel(OpId::kExp, kCPU, floating_unary<ExpOp>, HalfSupport::kAny);
  register_kernel(OpId::kLog, kCPU, floating_unary<LogOp>, HalfSupport::kAny);
  register_kernel(OpId::kSqrt, kCPU, floating_unary<SqrtOp>, HalfSupport::kAny);
  register_kernel(OpId::kTanh, kCPU, floating_unary<TanhOp>, HalfSupport::kAny);
  register_kernel(OpId::kErf, kCPU, floating_unary<ErfOp>, HalfSupport::kAny);
  register_kernel(OpId::kSin, kCPU, floating_unary<SinOp>, HalfSupport::kAny);
  register_kernel(OpId::kCos, kCPU, floating_unary<CosOp>, HalfSupport::kAny);
  register_kernel(OpId::kTan, kCPU, floating_unary<TanOp>, HalfSupport::kAny);
  register_kernel(OpId::kArcsin, kCPU, floating_unary<ArcsinOp>, HalfSupport::kAny);
  register_kernel(OpId::kArccos, kCPU, floating_unary<ArccosOp>, HalfSupport::kAny);
  register_kernel(OpId::kArctan, kCPU, floating_unary<ArctanOp>, HalfSupport::kAny);
  register_kernel(OpId::kSinh, kCPU, floating_unary<SinhOp>, HalfSupport::kAny);
  register_kernel(OpId::kCosh, kCPU, floating_unary<CoshOp>, HalfSupport::kAny);
  register_kernel(OpId::kArcsinh, kCPU, floating_unary<ArcsinhOp>, HalfSupport::kAny);
  register_kernel(OpId::kArccosh, kCPU, floating_unary<ArccoshOp>, HalfSupport::kAny);
  register_kernel(OpId::kArctanh, kCPU, floating_unary<ArctanhOp>, HalfSupport::kAny);
  register_kernel(OpId::kRound, kCPU, floating_unary<RoundOp>, HalfSupport::kAny);
  register_kernel(OpId::kRint, kCPU, floating_unary<RintOp>, HalfSupport::kAny);
  register_kernel(OpId::kCeil, kCPU, floating_unary<CeilOp>, HalfSupport::kAny);
  register_kernel(OpId::kFloor, kCPU, floating_unary<FloorOp>, HalfSupport::kAny);
  register_kernel(OpId::kSign, kCPU, numeric_unary<SignOp>, HalfSupport::kAny);
  register_kernel(OpId::kSigmoid, kCPU, floating_unary<SigmoidOp>, HalfSupport::kAny);
  register_kernel(OpId::kSquare, kCPU, numeric_unary<SquareOp>, HalfSupport::kAny);
  register_kernel(OpId::kRelu, kCPU, numeric_unary<ReluOp>, HalfSupport::kAny);
  register_kernel(OpId::kAbs, kCPU, numeric_unary<AbsOp>, HalfSupport::kAny);
  register_kernel(OpId::kNegative, kCPU, numeric_unary<NegativeOp>, HalfSupport::kAny);
  register_kernel(OpId::kClip, kCPU, clip, HalfSupport::kAny);
  register_kernel(OpId::kCopy, kCPU, copy, HalfSupport::kAny);
  register_kernel(OpId::kBlockGrad, kCPU, copy, HalfSupport::kAny);
  register_kernel(OpId::kCast, kCPU, cast, HalfSupport::kAny);
}

}  // namespace kiln
