// CUDA kernels of the matrix family: layout ops as one strided copy
// (elemwise.cu's launch_strided_copy), any dtype. take, one_hot and
// _backward_take have no CUDA kernel yet (README.md).
#include "backends/cuda/kernel_util.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"

namespace kiln {
namespace {

int elem(const TensorView& t) { return static_cast<int>(dtype_size(t.dtype)); }

void strided(const KernelContext& ctx, const TensorView& x, const TensorView& y, const cuda::StridedIndex& ix) {
  KILN_CUDA_LAUNCH(cuda::launch_strided_copy(x.data, y.data, elem(x), ix, cuda::stream_of(ctx)), ctx);
}

void copy_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (in[0].data == out[0].data || out[0].bytes() == 0) return;
  KILN_CUDA_CHECK(cudaMemcpyAsync(out[0].data, in[0].data, out[0].bytes(), cudaMemcpyDeviceToDevice,
                                  cuda::stream_of(ctx)),
                  ctx.run.device);
}

void zero(const KernelContext& ctx, const TensorView& t) {
  if (t.bytes() == 0) return;
  KILN_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), cuda::stream_of(ctx)), ctx.run.device);
}

void transpose_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView &x = in[0], &y = out[0];
  std::vector<int> perm = transpose_axes(ctx.attrs.as<TransposeAttrs>().axes, x.shape.ndim());
  auto xs = x.shape.strides(), ys = y.shape.strides();
  cuda::StridedIndex ix;
  ix.ndim = y.shape.ndim();
  for (int k = 0; k < ix.ndim; ++k) {
    ix.shape[k] = y.shape[k];
    ix.out_stride[k] = ys[k];
    ix.in_stride[k] = xs[perm[k]];
  }
  strided(ctx, x, y, ix);
}

// y = x[ranges] (ranges cover the leading axes; the rest whole).
void copy_slice(const KernelContext& ctx, const TensorView& x, const TensorView& y,
                const std::vector<SliceRange>& ranges) {
  auto xs = x.shape.strides(), ys = y.shape.strides();
  cuda::StridedIndex ix;
  ix.ndim = x.shape.ndim();
  for (int k = 0; k < ix.ndim; ++k) {
    int64_t begin = 0, step = 1;
    if (k < static_cast<int>(ranges.size())) {
      begin = ranges[k].begin;
      step = ranges[k].step;
    }
    ix.in_offset += begin * xs[k];
    ix.shape[k] = y.shape[k];
    ix.in_stride[k] = xs[k] * step;
    ix.out_stride[k] = ys[k];
  }
  strided(ctx, x, y, ix);
}

// dx = zeros, dx[ranges] = dy.
void scatter_slice(const KernelContext& ctx, const TensorView& dy, const TensorView& dx,
                   const std::vector<SliceRange>& ranges) {
  zero(ctx, dx);
  auto xs = dx.shape.strides(), ys = dy.shape.strides();
  cuda::StridedIndex ix;
  ix.ndim = dx.shape.ndim();
  for (int k = 0; k < ix.ndim; ++k) {
    int64_t begin = 0, step = 1;
    if (k < static_cast<int>(ranges.size())) {
      begin = ranges[k].begin;
      step = ranges[k].step;
    }
    ix.out_offset += begin * xs[k];
    ix.shape[k] = dy.shape[k];
    ix.out_stride[k] = xs[k] * step;
    ix.in_stride[k] = ys[k];
  }
  strided(ctx, dy, dx, ix);
}

std::vector<SliceRange> slice_ranges(const Shape& shape, const OptIntTuple& begin, const OptIntTuple& end,
                                     const OptIntTuple& step) {
  std::vector<SliceRange> ranges;
  for (size_t i = 0; i < begin.size(); ++i) {
    auto st = step.empty() ? std::nullopt : step[i];
    ranges.push_back(slice_range(shape[static_cast<int>(i)], begin[i], end[i], st));
  }
  return ranges;
}

void slice_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<SliceAttrs>();
  copy_slice(ctx, in[0], out[0], slice_ranges(in[0].shape, a.begin, a.end, a.step));
}

void slice_axis_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<SliceAxisAttrs>();
  int axis = normalize_axis(a.axis, in[0].shape.ndim(), "slice_axis");
  std::vector<SliceRange> ranges(static_cast<size_t>(axis) + 1, SliceRange{0, 1, 0});
  ranges[axis] = slice_range(in[0].shape[axis], a.begin, a.end, 1);
  copy_slice(ctx, in[0], out[0], ranges);
}

void slice_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<SliceBackwardAttrs>();
  scatter_slice(ctx, in[0], out[0], slice_ranges(out[0].shape, a.begin, a.end, a.step));
}

void slice_axis_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                                std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<SliceAxisBackwardAttrs>();
  int axis = normalize_axis(a.axis, out[0].shape.ndim(), "slice_axis");
  std::vector<SliceRange> ranges(static_cast<size_t>(axis) + 1, SliceRange{0, 1, 0});
  ranges[axis] = slice_range(out[0].shape[axis], a.begin, a.end, 1);
  scatter_slice(ctx, in[0], out[0], ranges);
}

// Copies between a dense `part` and the block of `whole` at `offset` along `axis`.
void copy_block(const KernelContext& ctx, const TensorView& whole, const TensorView& part, const Shape& part_shape,
                int axis, int64_t offset, bool into_whole) {
  auto ws = whole.shape.strides(), ps = part_shape.strides();
  cuda::StridedIndex ix;
  ix.ndim = part_shape.ndim();
  for (int d = 0; d < ix.ndim; ++d) {
    ix.shape[d] = part_shape[d];
    ix.in_stride[d] = into_whole ? ps[d] : ws[d];
    ix.out_stride[d] = into_whole ? ws[d] : ps[d];
  }
  (into_whole ? ix.out_offset : ix.in_offset) = offset * ws[axis];
  if (into_whole) {
    strided(ctx, part, whole, ix);
  } else {
    strided(ctx, whole, part, ix);
  }
}

Shape with_unit_axis(const Shape& s, int axis) {
  std::vector<int64_t> dims = s.to_vector();
  dims.insert(dims.begin() + axis, 1);
  return Shape(dims);
}

void concat_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  int axis = normalize_axis(ctx.attrs.as<ConcatAttrs>().dim, out[0].shape.ndim(), "Concat");
  int64_t offset = 0;
  for (const TensorView& x : in) {
    copy_block(ctx, out[0], x, x.shape, axis, offset, true);
    offset += x.shape[axis];
  }
}

void stack_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  int axis = normalize_axis(ctx.attrs.as<StackAttrs>().axis, out[0].shape.ndim(), "stack");
  for (size_t k = 0; k < in.size(); ++k)
    copy_block(ctx, out[0], in[k], with_unit_axis(in[k].shape, axis), axis, static_cast<int64_t>(k), true);
}

void split_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<SplitAttrs>();
  int axis = normalize_axis(a.axis, in[0].shape.ndim(), "SliceChannel");
  for (size_t k = 0; k < out.size(); ++k) {
    Shape part = a.squeeze_axis ? with_unit_axis(out[k].shape, axis) : out[k].shape;
    copy_block(ctx, in[0], out[k], part, axis, static_cast<int64_t>(k) * part[axis], false);
  }
}

void broadcast_to_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView &x = in[0], &y = out[0];
  auto strides = cuda::broadcast_strides(x.shape, y.shape);
  auto ys = y.shape.strides();
  cuda::StridedIndex ix;
  ix.ndim = y.shape.ndim();
  for (int d = 0; d < ix.ndim; ++d) {
    ix.shape[d] = y.shape[d];
    ix.in_stride[d] = strides[static_cast<size_t>(d)];
    ix.out_stride[d] = ys[d];
  }
  strided(ctx, x, y, ix);
}

}  // namespace

void register_cuda_matrix_kernels() {
  constexpr DeviceKind k = DeviceKind::kCUDA;
  register_kernel(OpId::kReshape, k, copy_kernel, HalfSupport::kAny);
  register_kernel(OpId::kExpandDims, k, copy_kernel, HalfSupport::kAny);
  register_kernel(OpId::kFlatten, k, copy_kernel, HalfSupport::kAny);
  register_kernel(OpId::kTranspose, k, transpose_kernel, HalfSupport::kAny);
  register_kernel(OpId::kSlice, k, slice_kernel, HalfSupport::kAny);
  register_kernel(OpId::kSliceAxis, k, slice_axis_kernel, HalfSupport::kAny);
  register_kernel(OpId::kConcat, k, concat_kernel, HalfSupport::kAny);
  register_kernel(OpId::kStack, k, stack_kernel, HalfSupport::kAny);
  register_kernel(OpId::kSplit, k, split_kernel, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastTo, k, broadcast_to_kernel, HalfSupport::kAny);
  register_kernel(OpId::kSliceBackward, k, slice_backward_kernel, HalfSupport::kAny);
  register_kernel(OpId::kSliceAxisBackward, k, slice_axis_backward_kernel, HalfSupport::kAny);
}

}  // namespace kiln
