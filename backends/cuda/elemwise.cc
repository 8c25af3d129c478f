// CUDA kernels of the elemwise and init families (registration and dispatch;
// the kernels are in elemwise.cu). Arithmetic on float32, float16 or bfloat16
// (16-bit values loaded and stored directly, computed in float32); where,
// _copy, BlockGrad, Cast and the init ops handle every dtype but
// int16/uint16/uint32/uint64.
#include "backends/cuda/kernel_util.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/init.h"

namespace kiln {
namespace {

using cuda::BinaryOp;
using cuda::UnaryOp;

template <BinaryOp kOp>
void binary(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const int dtype = cuda::require_float(in, out);
  auto ix = cuda::make_broadcast_index(in[0].shape, in[1].shape, out[0].shape);
  KILN_CUDA_LAUNCH(cuda::launch_binary(kOp, dtype, in[0].data, in[1].data, out[0].data, out[0].size(), ix, 0, 0.0f,
                                       0.0f, cuda::stream_of(ctx)),
                   ctx);
}

// x op scalar, or scalar op x when kReversed.
template <BinaryOp kOp, bool kReversed = false>
void scalar(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const int dtype = cuda::require_float(in, out);
  const float value = cuda::attr_as(in[0].dtype, ctx.attrs.as<ScalarAttrs>().scalar);
  const void* x = in[0].data;
  KILN_CUDA_LAUNCH(cuda::launch_binary(kOp, dtype, kReversed ? nullptr : x, kReversed ? x : nullptr, out[0].data,
                                       out[0].size(), {}, kReversed ? 2 : 1, value, 0.0f, cuda::stream_of(ctx)),
                   ctx);
}

template <UnaryOp kOp>
void unary(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const int dtype = cuda::require_float(in, out);
  KILN_CUDA_LAUNCH(cuda::launch_unary(kOp, dtype, in[0].data, out[0].data, out[0].size(), 0, 0, cuda::stream_of(ctx)),
                   ctx);
}

void clip(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const int dtype = cuda::require_float(in, out);
  const auto& a = ctx.attrs.as<ClipAttrs>();
  KILN_CUDA_LAUNCH(cuda::launch_unary(UnaryOp::kClip, dtype, in[0].data, out[0].data, out[0].size(),
                                      cuda::attr_as(in[0].dtype, a.a_min), cuda::attr_as(in[0].dtype, a.a_max),
                                      cuda::stream_of(ctx)),
                   ctx);
}

bool cuda_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kFloat64: case DType::kFloat16: case DType::kBfloat16: case DType::kUint8:
    case DType::kInt8: case DType::kInt32: case DType::kInt64: case DType::kBool:
      return true;
    default:
      return false;
  }
}

void require_cuda_dtype(DType t) {
  KILN_CHECK(cuda_dtype(t), NotSupported, "dtype {} has no CUDA kernel yet (backends/cuda/README.md)", t);
}

void copy(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (in[0].data == out[0].data || out[0].bytes() == 0) return;
  KILN_CUDA_CHECK(cudaMemcpyAsync(out[0].data, in[0].data, out[0].bytes(), cudaMemcpyDeviceToDevice,
                                  cuda::stream_of(ctx)),
                  ctx.run.device);
}

void cast(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (in[0].dtype == out[0].dtype) return copy(ctx, in, out);
  require_cuda_dtype(in[0].dtype);
  require_cuda_dtype(out[0].dtype);
  KILN_CUDA_LAUNCH(cuda::launch_cast(in[0].data, static_cast<int>(in[0].dtype), out[0].data,
                                     static_cast<int>(out[0].dtype), out[0].size(), cuda::stream_of(ctx)),
                   ctx);
}

// Any dtypes (the condition's and the values'): only the condition's bits
// and the values' bytes matter.
void where(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  KILN_CHECK(in[0].shape == out[0].shape && in[1].shape == out[0].shape && in[2].shape == out[0].shape,
             NotSupported, "where: the CUDA kernel needs equal shapes so far (got {}, {}, {})", in[0].shape,
             in[1].shape, in[2].shape);
  KILN_CUDA_LAUNCH(cuda::launch_where(in[0].data, static_cast<int>(dtype_size(in[0].dtype)), is_floating(in[0].dtype),
                                      in[1].data, in[2].data, out[0].data, static_cast<int>(dtype_size(out[0].dtype)),
                                      out[0].size(), cuda::stream_of(ctx)),
                   ctx);
}

// ---- init family

void fill(const KernelContext& ctx, const TensorView& out, double value) {
  require_cuda_dtype(out.dtype);
  KILN_CUDA_LAUNCH(cuda::launch_fill(out.data, static_cast<int>(out.dtype), out.size(), value, 0, 1, 0,
                                     cuda::stream_of(ctx)),
                   ctx);
}

void zeros(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  fill(ctx, out[0], 0.0);
}
void ones(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  fill(ctx, out[0], 1.0);
}
void full(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  fill(ctx, out[0], ctx.attrs.as<FullAttrs>().value);
}

void arange(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<ArangeAttrs>();
  require_cuda_dtype(out[0].dtype);
  double start = a.stop ? a.start : 0;
  KILN_CUDA_LAUNCH(cuda::launch_fill(out[0].data, static_cast<int>(out[0].dtype), out[0].size(), start, a.step,
                                     a.repeat, 1, cuda::stream_of(ctx)),
                   ctx);
}

template <int kKind>
void random(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<RandomAttrs>();
  require_cuda_dtype(out[0].dtype);
  KILN_CUDA_LAUNCH(cuda::launch_random(out[0].data, static_cast<int>(out[0].dtype), out[0].size(), a.a, a.b,
                                       static_cast<uint64_t>(a.seed), static_cast<uint64_t>(a.offset), kKind,
                                       cuda::stream_of(ctx)),
                   ctx);
}

}  // namespace

void register_cuda_elemwise_kernels() {
  constexpr DeviceKind k = DeviceKind::kCUDA;
  constexpr auto kAny = HalfSupport::kAny;  // float16/bfloat16 read and written directly
  register_kernel(OpId::kElemwiseAdd, k, binary<BinaryOp::kAdd>, kAny);
  register_kernel(OpId::kElemwiseSub, k, binary<BinaryOp::kSub>, kAny);
  register_kernel(OpId::kElemwiseMul, k, binary<BinaryOp::kMul>, kAny);
  register_kernel(OpId::kElemwiseDiv, k, binary<BinaryOp::kDiv>, kAny);
  register_kernel(OpId::kBroadcastAdd, k, binary<BinaryOp::kAdd>, kAny);
  register_kernel(OpId::kBroadcastSub, k, binary<BinaryOp::kSub>, kAny);
  register_kernel(OpId::kBroadcastMul, k, binary<BinaryOp::kMul>, kAny);
  register_kernel(OpId::kBroadcastDiv, k, binary<BinaryOp::kDiv>, kAny);
  register_kernel(OpId::kBroadcastPower, k, binary<BinaryOp::kPower>, kAny);
  register_kernel(OpId::kBroadcastMaximum, k, binary<BinaryOp::kMaximum>, kAny);
  register_kernel(OpId::kBroadcastMinimum, k, binary<BinaryOp::kMinimum>, kAny);
  register_kernel(OpId::kBroadcastMod, k, binary<BinaryOp::kMod>, kAny);
  register_kernel(OpId::kBroadcastFmod, k, binary<BinaryOp::kFmod>, kAny);
  register_kernel(OpId::kBroadcastEqual, k, binary<BinaryOp::kEqual>, kAny);
  register_kernel(OpId::kBroadcastNotEqual, k, binary<BinaryOp::kNotEqual>, kAny);
  register_kernel(OpId::kBroadcastGreater, k, binary<BinaryOp::kGreater>, kAny);
  register_kernel(OpId::kBroadcastGreaterEqual, k, binary<BinaryOp::kGreaterEqual>, kAny);
  register_kernel(OpId::kBroadcastLesser, k, binary<BinaryOp::kLesser>, kAny);
  register_kernel(OpId::kBroadcastLesserEqual, k, binary<BinaryOp::kLesserEqual>, kAny);

  register_kernel(OpId::kPlusScalar, k, scalar<BinaryOp::kAdd>, kAny);
  register_kernel(OpId::kMinusScalar, k, scalar<BinaryOp::kSub>, kAny);
  register_kernel(OpId::kRMinusScalar, k, scalar<BinaryOp::kSub, true>, kAny);
  register_kernel(OpId::kMulScalar, k, scalar<BinaryOp::kMul>, kAny);
  register_kernel(OpId::kDivScalar, k, scalar<BinaryOp::kDiv>, kAny);
  register_kernel(OpId::kRDivScalar, k, scalar<BinaryOp::kDiv, true>, kAny);
  register_kernel(OpId::kPowerScalar, k, scalar<BinaryOp::kPower>, kAny);
  register_kernel(OpId::kRPowerScalar, k, scalar<BinaryOp::kPower, true>, kAny);
  register_kernel(OpId::kMaximumScalar, k, scalar<BinaryOp::kMaximum>, kAny);
  register_kernel(OpId::kMinimumScalar, k, scalar<BinaryOp::kMinimum>, kAny);
  register_kernel(OpId::kEqualScalar, k, scalar<BinaryOp::kEqual>, kAny);
  register_kernel(OpId::kNotEqualScalar, k, scalar<BinaryOp::kNotEqual>, kAny);
  register_kernel(OpId::kGreaterScalar, k, scalar<BinaryOp::kGreater>, kAny);
  register_kernel(OpId::kGreaterEqualScalar, k, scalar<BinaryOp::kGreaterEqual>, kAny);
  register_kernel(OpId::kLesserScalar, k, scalar<BinaryOp::kLesser>, kAny);
  register_kernel(OpId::kLesserEqualScalar, k, scalar<BinaryOp::kLesserEqual>, kAny);

  register_kernel(OpId::kExp, k, unary<UnaryOp::kExp>, kAny);
  register_kernel(OpId::kLog, k, unary<UnaryOp::kLog>, kAny);
  register_kernel(OpId::kSqrt, k, unary<UnaryOp::kSqrt>, kAny);
  register_kernel(OpId::kSquare, k, unary<UnaryOp::kSquare>, kAny);
  register_kernel(OpId::kTanh, k, unary<UnaryOp::kTanh>, kAny);
  register_kernel(OpId::kErf, k, unary<UnaryOp::kErf>, kAny);
  register_kernel(OpId::kSin, k, unary<UnaryOp::kSin>, kAny);
  register_kernel(OpId::kCos, k, unary<UnaryOp::kCos>, kAny);
  register_kernel(OpId::kTan, k, unary<UnaryOp::kTan>, kAny);
  register_kernel(OpId::kArcsin, k, unary<UnaryOp::kArcsin>, kAny);
  register_kernel(OpId::kArccos, k, unary<UnaryOp::kArccos>, kAny);
  register_kernel(OpId::kArctan, k, unary<UnaryOp::kArctan>, kAny);
  register_kernel(OpId::kSinh, k, unary<UnaryOp::kSinh>, kAny);
  register_kernel(OpId::kCosh, k, unary<UnaryOp::kCosh>, kAny);
  register_kernel(OpId::kArcsinh, k, unary<UnaryOp::kArcsinh>, kAny);
  register_kernel(OpId::kArccosh, k, unary<UnaryOp::kArccosh>, kAny);
  register_kernel(OpId::kArctanh, k, unary<UnaryOp::kArctanh>, kAny);
  register_kernel(OpId::kRound, k, unary<UnaryOp::kRound>, kAny);
  register_kernel(OpId::kRint, k, unary<UnaryOp::kRint>, kAny);
  register_kernel(OpId::kCeil, k, unary<UnaryOp::kCeil>, kAny);
  register_kernel(OpId::kFloor, k, unary<UnaryOp::kFloor>, kAny);
  register_kernel(OpId::kSign, k, unary<UnaryOp::kSign>, kAny);
  register_kernel(OpId::kSigmoid, k, unary<UnaryOp::kSigmoid>, kAny);
  register_kernel(OpId::kRelu, k, unary<UnaryOp::kRelu>, kAny);
  register_kernel(OpId::kAbs, k, unary<UnaryOp::kAbs>, kAny);
  register_kernel(OpId::kNegative, k, unary<UnaryOp::kNegative>, kAny);
  register_kernel(OpId::kClip, k, clip, kAny);
  register_kernel(OpId::kCopy, k, copy, HalfSupport::kAny);
  register_kernel(OpId::kBlockGrad, k, copy, HalfSupport::kAny);
  register_kernel(OpId::kCast, k, cast, HalfSupport::kAny);
  register_kernel(OpId::kWhere, k, where, kAny);

  register_kernel(OpId::kZeros, k, zeros, HalfSupport::kAny);
  register_kernel(OpId::kOnes, k, ones, HalfSupport::kAny);
  register_kernel(OpId::kFull, k, full, HalfSupport::kAny);
  register_kernel(OpId::kArange, k, arange, HalfSupport::kAny);
  register_kernel(OpId::kRandomUniform, k, random<0>, HalfSupport::kAny);
  register_kernel(OpId::kRandomNormal, k, random<1>, HalfSupport::kAny);
}

}  // namespace kiln
