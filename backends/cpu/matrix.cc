// CPU kernels of the matrix family and its backward ops. Data movement goes
// through strided_copy (backends/cpu/matrix_copy.h); take, _backward_take and
// one_hot convert their indices first.
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/matrix_copy.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

using cpu::StridedLayout;

size_t elem_size(const TensorView& t) { return dtype_size(t.dtype); }

char* at(const TensorView& t, int64_t element) {
  return static_cast<char*>(t.data) + element * static_cast<int64_t>(elem_size(t));
}

// ---- pure moves

void copy_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (out[0].data != in[0].data) cpu::parallel_memcpy(ctx.run.num_threads, out[0].data, in[0].data, in[0].bytes());
}

void transpose_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView &x = in[0], &y = out[0];
  std::vector<int> perm = transpose_axes(ctx.attrs.as<TransposeAttrs>().axes, x.shape.ndim());
  auto xs = x.shape.strides(), ys = y.shape.strides();
  StridedLayout l;
  for (int k = 0; k < y.shape.ndim(); ++k) l.push(y.shape[k], ys[k], xs[perm[k]]);
  cpu::strided_copy(ctx.run.num_threads, elem_size(x), y.data, x.data, l);
}

// out = x[ranges[0], ranges[1], ...]; axes past ranges.size() are whole.
void copy_slice(const KernelContext& ctx, const TensorView& x, const TensorView& y,
                const std::vector<SliceRange>& ranges) {
  if (y.size() == 0) return;
  auto xs = x.shape.strides(), ys = y.shape.strides();
  StridedLayout l;
  int64_t first = 0;
  for (int k = 0; k < x.shape.ndim(); ++k) {
    int64_t begin = 0, step = 1;
    if (k < static_cast<int>(ranges.size())) {
      begin = ranges[k].begin;
      step = ranges[k].step;
    }
    first += begin * xs[k];
    l.push(y.shape[k], ys[k], xs[k] * step);
  }
  cpu::strided_copy(ctx.run.num_threads, elem_size(x), y.data, at(x, first), l);
}

void slice_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<SliceAttrs>();
  std::vector<SliceRange> ranges;
  for (size_t i = 0; i < a.begin.size(); ++i) {
    auto step = a.step.empty() ? std::nullopt : a.step[i];
    ranges.push_back(slice_range(in[0].shape[static_cast<int>(i)], a.begin[i], a.end[i], step));
  }
  copy_slice(ctx, in[0], out[0], ranges);
}

void slice_axis_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<SliceAxisAttrs>();
  int axis = normalize_axis(a.axis, in[0].shape.ndim(), "slice_axis");
  std::vector<SliceRange> ranges(static_cast<size_t>(axis) + 1, SliceRange{0, 1, 0});
  ranges[axis] = slice_range(in[0].shape[axis], a.begin, a.end, 1);
  copy_slice(ctx, in[0], out[0], ranges);
}

// Copies between a dense `part` and the block of dense `whole` that starts at
// `offset` along `axis` (part and whole have equal dims except along axis).
void copy_block(const KernelContext& ctx, const TensorView& whole, const Shape& part_shape, void* part, int axis,
                int64_t offset, bool into_whole) {
  auto ws = whole.shape.strides(), ps = part_shape.strides();
  StridedLayout l;
  for (int d = 0; d < part_shape.ndim(); ++d)
    l.push(part_shape[d], into_whole ? ws[d] : ps[d], into_whole ? ps[d] : ws[d]);
  void* block = at(whole, offset * ws[axis]);
  if (into_whole) {
    cpu::strided_copy(ctx.run.num_threads, elem_size(whole), block, part, l);
  } else {
    cpu::strided_copy(ctx.run.num_threads, elem_size(whole), part, block, l);
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
    copy_block(ctx, out[0], x.shape, x.data, axis, offset, true);
    offset += x.shape[axis];
  }
}

void stack_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  int axis = normalize_axis(ctx.attrs.as<StackAttrs>().axis, out[0].shape.ndim(), "stack");
  for (size_t k = 0; k < in.size(); ++k)
    copy_block(ctx, out[0], with_unit_axis(in[k].shape, axis), in[k].data, axis, static_cast<int64_t>(k), true);
}

void split_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<SplitAttrs>();
  int axis = normalize_axis(a.axis, in[0].shape.ndim(), "SliceChannel");
  for (size_t k = 0; k < out.size(); ++k) {
    Shape part = a.squeeze_axis ? with_unit_axis(out[k].shape, axis) : out[k].shape;
    copy_block(ctx, in[0], part, out[k].data, axis, static_cast<int64_t>(k) * part[axis], false);
  }
}

void broadcast_to_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView &x = in[0], &y = out[0];
  auto xs = x.shape.strides(), ys = y.shape.strides();
  int lead = y.shape.ndim() - x.shape.ndim();
  StridedLayout l;
  for (int d = 0; d < y.shape.ndim(); ++d) {
    bool broadcast = d < lead || x.shape[d - lead] == 1;
    l.push(y.shape[d], ys[d], broadcast ? 0 : xs[d - lead]);
  }
  cpu::strided_copy(ctx.run.num_threads, elem_size(x), y.data, x.data, l);
}

// ---- backward of slice and slice_axis: zeros, then dy into the slice

void zero_fill(int num_threads, const TensorView& t) {
  auto* d = static_cast<char*>(t.data);
  cpu::parallel_for(
      num_threads, static_cast<int64_t>(t.bytes()), [&](int64_t b, int64_t e) { std::memset(d + b, 0, e - b); },
      cpu::kDefaultGrain * 8);
}

// dx = zeros, dx[ranges[0], ranges[1], ...] = dy. Axes of negative step are
// walked from their last element, so every destination stride is positive
// (strided_copy allows negative strides on the source only).
void scatter_slice(const KernelContext& ctx, const TensorView& dy, const TensorView& dx,
                   const std::vector<SliceRange>& ranges) {
  zero_fill(ctx.run.num_threads, dx);
  if (dy.size() == 0) return;
  auto xs = dx.shape.strides(), ys = dy.shape.strides();
  StridedLayout l;
  int64_t first_dst = 0, first_src = 0;
  for (int k = 0; k < dx.shape.ndim(); ++k) {
    int64_t begin = 0, step = 1, len = dy.shape[k];
    if (k < static_cast<int>(ranges.size())) {
      begin = ranges[k].begin;
      step = ranges[k].step;
    }
    if (step > 0) {
      first_dst += begin * xs[k];
      l.push(len, xs[k] * step, ys[k]);
    } else {
      first_dst += (begin + (len - 1) * step) * xs[k];
      first_src += (len - 1) * ys[k];
      l.push(len, xs[k] * -step, -ys[k]);
    }
  }
  cpu::strided_copy(ctx.run.num_threads, elem_size(dx), at(dx, first_dst), at(dy, first_src), l);
}

void slice_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<SliceBackwardAttrs>();
  std::vector<SliceRange> ranges;
  for (size_t i = 0; i < a.begin.size(); ++i) {
    auto step = a.step.empty() ? std::nullopt : a.step[i];
    ranges.push_back(slice_range(out[0].shape[static_cast<int>(i)], a.begin[i], a.end[i], step));
  }
  scatter_slice(ctx, in[0], out[0], ranges);
}

void slice_axis_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                                std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<SliceAxisBackwardAttrs>();
  int axis = normalize_axis(a.axis, out[0].shape.ndim(), "slice_axis");
  std::vector<SliceRange> ranges(static_cast<size_t>(axis) + 1, SliceRange{0, 1, 0});
  ranges[axis] = slice_range(out[0].shape[axis], a.begin, a.end, 1);
  scatter_slice(ctx, in[0], out[0], ranges);
}

// ---- indices

template <typename T>
int64_t to_index(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return to_index(half_to_float(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return to_index(bf16_to_float(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    constexpr double kLimit = 9.2e18;                           // inside int64's range
    if (!(v == v)) return std::numeric_limits<int64_t>::min();  // NaN: out of range for every axis
    return static_cast<int64_t>(std::max<double>(-kLimit, std::min<double>(kLimit, v)));
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return static_cast<int64_t>(std::min<uint64_t>(v, std::numeric_limits<int64_t>::max()));
  } else {
    return static_cast<int64_t>(v);
  }
}

// Indices truncated to integers (any dtype).
std::vector<int64_t> load_indices(const TensorView& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.size()));
  dispatch_dtype(t.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.ptr<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = to_index(p[i]);
  });
  return out;
}

int64_t resolve_index(int64_t i, int64_t n, TakeMode mode, size_t position) {
  switch (mode) {
    case TakeMode::kClip:
      return std::clamp<int64_t>(i, 0, n - 1);
    case TakeMode::kWrap:
      return (i % n + n) % n;
    case TakeMode::kRaise:
      KILN_CHECK(i >= -n && i < n, IndexError,
                 "take: index {} (element {} of indices) is out of range for an axis of length {}", i, position, n);
      return i < 0 ? i + n : i;
  }
  return 0;
}

template <typename U>
void gather_rows(int num_threads, U* dst, const U* src, const std::vector<int64_t>& ids, int64_t outer, int64_t n,
                 int64_t inner) {
  auto m = static_cast<int64_t>(ids.size());
  cpu::parallel_for(
      num_threads, outer * m,
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const U* s = src + ((r / m) * n + ids[static_cast<size_t>(r % m)]) * inner;
          if (inner == 1) {
            dst[r] = *s;
          } else {
            std::memcpy(dst + r * inner, s, static_cast<size_t>(inner) * sizeof(U));
          }
        }
      },
      std::max<int64_t>(1, cpu::kDefaultGrain / std::max<int64_t>(inner, 1)));
}

void take_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<TakeAttrs>();
  const TensorView &x = in[0], &indices = in[1];
  int axis = normalize_axis(a.axis, x.shape.ndim(), "take");
  int64_t outer = 1, inner = 1, n = x.shape[axis];
  for (int d = 0; d < axis; ++d) outer *= x.shape[d];
  for (int d = axis + 1; d < x.shape.ndim(); ++d) inner *= x.shape[d];
  if (out[0].size() == 0) return;
  std::vector<int64_t> ids = load_indices(indices);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = resolve_index(ids[i], n, a.mode, i);
  cpu::dispatch_unit(elem_size(x), [&](auto unit) {
    using U = decltype(unit);
    gather_rows(ctx.run.num_threads, out[0].ptr<U>(), x.ptr<U>(), ids, outer, n, inner);
  });
}

// Embedding is a take of whole rows of its weight, with its own id check.
void embedding_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<EmbeddingAttrs>();
  if (out[0].size() == 0) return;
  std::vector<int64_t> ids = load_indices(in[0]);
  for (size_t i = 0; i < ids.size(); ++i) check_embedding_id(ids[i], i, a.input_dim);
  cpu::dispatch_unit(elem_size(in[1]), [&](auto unit) {
    using U = decltype(unit);
    gather_rows(ctx.run.num_threads, out[0].ptr<U>(), in[1].ptr<U>(), ids, 1, a.input_dim, a.output_dim);
  });
}

// dx[o, ids[j], i] += dy[o, j, i] for x seen as [outer, n, inner] and dy as
// [outer, m, inner]. Work items are (o, block of destination rows, block of
// i); each item scans all j in order, so every element sums its
// contributions in the same order whatever the thread count. Row blocks exist
// only to give threads work when outer and inner are small (taking from a
// vector): each then rescans the indices, which costs m per thread.
template <typename T>
void scatter_add_rows(int num_threads, T* dx, const T* dy, const std::vector<int64_t>& ids, int64_t outer, int64_t n,
                      int64_t inner) {
  constexpr int64_t kInnerBlock = 1024;
  auto m = static_cast<int64_t>(ids.size());
  int64_t work = outer * m * inner;
  int threads = work < cpu::kDefaultGrain ? 1 : num_threads;
  int64_t inner_blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  int64_t row_blocks = outer * inner_blocks >= threads ? 1 : std::min<int64_t>(threads, n);
  int64_t rows_per_block = (n + row_blocks - 1) / row_blocks;
  cpu::parallel_for(
      threads, outer * row_blocks * inner_blocks,
      [&](int64_t b, int64_t e) {
        for (int64_t w = b; w < e; ++w) {
          int64_t ib = w % inner_blocks, rb = (w / inner_blocks) % row_blocks, o = w / (inner_blocks * row_blocks);
          int64_t r0 = rb * rows_per_block, r1 = std::min(n, r0 + rows_per_block);
          int64_t i0 = ib * kInnerBlock, i1 = std::min(inner, i0 + kInnerBlock);
          for (int64_t j = 0; j < m; ++j) {
            int64_t r = ids[static_cast<size_t>(j)];
            if (r < r0 || r >= r1) continue;
            T* d = dx + (o * n + r) * inner;
            const T* s = dy + (o * m + j) * inner;
            if constexpr (std::is_same_v<T, Half>) {
              for (int64_t i = i0; i < i1; ++i) d[i] = float_to_half(half_to_float(d[i]) + half_to_float(s[i]));
            } else if constexpr (std::is_same_v<T, BFloat16>) {
              for (int64_t i = i0; i < i1; ++i) d[i] = float_to_bf16(bf16_to_float(d[i]) + bf16_to_float(s[i]));
            } else {
              for (int64_t i = i0; i < i1; ++i) d[i] += s[i];
            }
          }
        }
      },
      1);
}

void take_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<TakeBackwardAttrs>();
  const TensorView &dy = in[0], &indices = in[1], &dx = out[0];
  int axis = normalize_axis(a.axis, dx.shape.ndim(), "take");
  int64_t outer = 1, inner = 1, n = dx.shape[axis];
  for (int d = 0; d < axis; ++d) outer *= dx.shape[d];
  for (int d = axis + 1; d < dx.shape.ndim(); ++d) inner *= dx.shape[d];
  zero_fill(ctx.run.num_threads, dx);
  if (dy.size() == 0) return;
  std::vector<int64_t> ids = load_indices(indices);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = resolve_index(ids[i], n, a.mode, i);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    scatter_add_rows(ctx.run.num_threads, dx.ptr<T>(), dy.ptr<T>(), ids, outer, n, inner);
  };
  switch (dx.dtype) {  // inference admits floating dtypes only
    case DType::kFloat32:
      return run(float{});
    case DType::kFloat64:
      return run(double{});
    case DType::kFloat16:
      return run(Half{});
    case DType::kBfloat16:
      return run(BFloat16{});
    default:
      KILN_ASSERT(false && "_backward_take: non-floating dtype passed inference");
  }
}

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Half>) {
    return float_to_half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return float_to_bf16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return static_cast<T>(v);
  }
}

void one_hot_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<OneHotAttrs>();
  if (out[0].size() == 0) return;
  std::vector<int64_t> ids = load_indices(in[0]);
  int64_t depth = a.depth;
  dispatch_dtype(out[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    T on = from_double<T>(a.on_value), off = from_double<T>(a.off_value);
    T* y = out[0].ptr<T>();
    cpu::parallel_for(
        ctx.run.num_threads, static_cast<int64_t>(ids.size()),
        [&](int64_t b, int64_t e) {
          std::fill(y + b * depth, y + e * depth, off);
          for (int64_t i = b; i < e; ++i)
            if (ids[i] >= 0 && ids[i] < depth) y[i * depth + ids[i]] = on;
        },
        std::max<int64_t>(1, cpu::kDefaultGrain / depth));
  });
}

}  // namespace

void register_cpu_matrix_kernels() {
  register_kernel(OpId::kReshape, DeviceKind::kCPU, copy_kernel, HalfSupport::kAny);
  register_kernel(OpId::kExpandDims, DeviceKind::kCPU, copy_kernel, HalfSupport::kAny);
  register_kernel(OpId::kTranspose, DeviceKind::kCPU, transpose_kernel, HalfSupport::kAny);
  register_kernel(OpId::kSlice, DeviceKind::kCPU, slice_kernel, HalfSupport::kAny);
  register_kernel(OpId::kSliceAxis, DeviceKind::kCPU, slice_axis_kernel, HalfSupport::kAny);
  register_kernel(OpId::kConcat, DeviceKind::kCPU, concat_kernel, HalfSupport::kAny);
  register_kernel(OpId::kStack, DeviceKind::kCPU, stack_kernel, HalfSupport::kAny);
  register_kernel(OpId::kSplit, DeviceKind::kCPU, split_kernel, HalfSupport::kAny);
  register_kernel(OpId::kBroadcastTo, DeviceKind::kCPU, broadcast_to_kernel, HalfSupport::kAny);
  register_kernel(OpId::kTake, DeviceKind::kCPU, take_kernel, HalfSupport::kAny);
  register_kernel(OpId::kOneHot, DeviceKind::kCPU, one_hot_kernel, HalfSupport::kAny);
  register_kernel(OpId::kSliceBackward, DeviceKind::kCPU, slice_backward_kernel, HalfSupport::kAny);
  register_kernel(OpId::kSliceAxisBackward, DeviceKind::kCPU, slice_axis_backward_kernel, HalfSupport::kAny);
  register_kernel(OpId::kTakeBackward, DeviceKind::kCPU, take_backward_kernel);
  register_kernel(OpId::kEmbedding, DeviceKind::kCPU, embedding_kernel);
}

}  // namespace kiln
