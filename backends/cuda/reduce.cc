// CUDA kernels of the reduce family (reduce.cu): float32, float16 or bfloat16 input,
// accumulated in float32.
#include <optional>

#include "backends/cuda/device_runtime.h"
#include "backends/cuda/kernel_util.h"
#include "ir/ops/reduce.h"

namespace kiln {
namespace {

using cuda::ReduceOp;

// Appends an axis of extent n and stride `stride` to (shape, strides):
// extent-1 axes are left out, and an axis folds into the previous one when
// the two walk memory as one (the previous stride is n * stride), so the
// flat index over the axes, and with it argmax's position, is unchanged.
void push_axis(int& ndim, int64_t* shape, int64_t* strides, int64_t n, int64_t stride) {
  if (n == 1) return;
  if (ndim > 0 && strides[ndim - 1] == n * stride) {
    shape[ndim - 1] *= n;
    strides[ndim - 1] = stride;
    return;
  }
  shape[ndim] = n;
  strides[ndim++] = stride;
}

// Splits x's axes into kept (outer, in order) and reduced (inner) by `mask`.
cuda::ReduceIndex make_index(const Shape& x, uint32_t mask) {
  cuda::ReduceIndex ix;
  auto strides = x.strides();
  for (int d = 0; d < x.ndim(); ++d) {
    if (mask & (1u << d)) {
      push_axis(ix.inner_ndim, ix.inner_shape, ix.inner_stride, x[d], strides[d]);
      ix.count *= x[d];
    } else {
      push_axis(ix.outer_ndim, ix.outer_shape, ix.outer_stride, x[d], strides[d]);
      ix.outputs *= x[d];
    }
  }
  return ix;
}

// x float32, float16 or bfloat16; y of x's dtype, or float32 for arg
// reductions of 16-bit x (their inferred type: bfloat16 holds indices to 256 only).
void run(const KernelContext& ctx, ReduceOp op, const TensorView& x, const TensorView& y, uint32_t mask) {
  const bool arg = op == ReduceOp::kArgmax || op == ReduceOp::kArgmin;
  const int dtype = cuda::require_float(std::span<const TensorView>(&x, 1),
                                        arg ? std::span<const TensorView>() : std::span<const TensorView>(&y, 1));
  KILN_CHECK(y.dtype == x.dtype || (arg && y.dtype == DType::kFloat32), NotSupported,
             "the CUDA reduction writes {} or float32 (arg reductions), not {}", x.dtype, y.dtype);
  const cuda::ReduceIndex index = make_index(x.shape, mask);
  const size_t bytes = cuda::reduce_workspace_bytes(op, index);
  std::optional<cuda::Scratch> ws;
  if (bytes > 0) ws.emplace(ctx.run.device, bytes);
  KILN_CUDA_LAUNCH(cuda::launch_reduce(op, dtype, x.data, y.data, static_cast<int>(y.dtype), index,
                                       ws ? ws->get() : nullptr, cuda::stream_of(ctx)),
                   ctx);
}

template <ReduceOp kOp>
void reduce_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<ReduceAttrs>();
  run(ctx, kOp, in[0], out[0], reduce_axes_mask(in[0].shape, a.axis, a.exclude));
}

void norm_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<NormAttrs>();
  run(ctx, a.ord == 1 ? ReduceOp::kNormL1 : ReduceOp::kNormL2, in[0], out[0],
      reduce_axes_mask(in[0].shape, a.axis, false));
}

template <ReduceOp kOp>
void arg_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<ArgReduceAttrs>();
  const Shape& x = in[0].shape;
  uint32_t mask = a.axis ? (1u << normalize_axis(*a.axis, x.ndim(), "argmax")) : (x.ndim() == 0 ? 0u : (1u << x.ndim()) - 1);
  run(ctx, kOp, in[0], out[0], mask);
}

}  // namespace

void register_cuda_reduce_kernels() {
  constexpr DeviceKind k = DeviceKind::kCUDA;
  // float16/bfloat16 read directly; argmax/argmin of them write float32 (as the CPU's widened kernels).
  constexpr auto kAny = HalfSupport::kAny;
  register_kernel(OpId::kSum, k, reduce_kernel<ReduceOp::kSum>, kAny);
  register_kernel(OpId::kMean, k, reduce_kernel<ReduceOp::kMean>, kAny);
  register_kernel(OpId::kMax, k, reduce_kernel<ReduceOp::kMax>, kAny);
  register_kernel(OpId::kMin, k, reduce_kernel<ReduceOp::kMin>, kAny);
  register_kernel(OpId::kProd, k, reduce_kernel<ReduceOp::kProd>, kAny);
  register_kernel(OpId::kNorm, k, norm_kernel, kAny);
  register_kernel(OpId::kArgmax, k, arg_kernel<ReduceOp::kArgmax>, kAny);
  register_kernel(OpId::kArgmin, k, arg_kernel<ReduceOp::kArgmin>, kAny);
}

}  // namespace kiln
