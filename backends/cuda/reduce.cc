// CUDA kernels of the reduce family (reduce.cu), float32.
#include "backends/cuda/kernel_util.h"
#include "ir/ops/reduce.h"

namespace kiln {
namespace {

using cuda::ReduceOp;

// Splits x's axes into kept (outer, in order) and reduced (inner) by `mask`.
cuda::ReduceIndex make_index(const Shape& x, uint32_t mask) {
  cuda::ReduceIndex ix;
  auto strides = x.strides();
  for (int d = 0; d < x.ndim(); ++d) {
    if (mask & (1u << d)) {
      ix.inner_shape[ix.inner_ndim] = x[d];
      ix.inner_stride[ix.inner_ndim++] = strides[d];
      ix.count *= x[d];
    } else {
      ix.outer_shape[ix.outer_ndim] = x[d];
      ix.outer_stride[ix.outer_ndim++] = strides[d];
      ix.outputs *= x[d];
    }
  }
  return ix;
}

void run(const KernelContext& ctx, ReduceOp op, const TensorView& x, const TensorView& y, uint32_t mask) {
  cuda::require_f32(std::span<const TensorView>(&x, 1), std::span<const TensorView>(&y, 1));
  KILN_CUDA_LAUNCH(cuda::launch_reduce(op, x.ptr<float>(), y.ptr<float>(), make_index(x.shape, mask),
                                       cuda::stream_of(ctx)),
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
  register_kernel(OpId::kSum, k, reduce_kernel<ReduceOp::kSum>);
  register_kernel(OpId::kMean, k, reduce_kernel<ReduceOp::kMean>);
  register_kernel(OpId::kMax, k, reduce_kernel<ReduceOp::kMax>);
  register_kernel(OpId::kMin, k, reduce_kernel<ReduceOp::kMin>);
  register_kernel(OpId::kProd, k, reduce_kernel<ReduceOp::kProd>);
  register_kernel(OpId::kNorm, k, norm_kernel);
  register_kernel(OpId::kArgmax, k, arg_kernel<ReduceOp::kArgmax>);
  register_kernel(OpId::kArgmin, k, arg_kernel<ReduceOp::kArgmin>);
}

}  // namespace kiln
