// take, _backward_take, one_hot, pick, _backward_pick and softmax's lengths
// (use_length) on CUDA. The
// indices are read back to the host, resolved there exactly as the CPU
// kernels resolve them (same truncation, modes and IndexError messages), and
// sent back as int64: one round trip per call, which keeps the semantics in
// one place. These ops are not on the chapter's training path.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cuda/device_runtime.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/softmax_length.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"

namespace kiln {
namespace {

// NaN handling differs between the CPU's two readers: take treats NaN as out
// of range for every axis; pick reads it as 0.
enum class NanAs { kOutOfRange, kZero };

std::vector<int64_t> read_indices(const KernelContext& ctx, const TensorView& t, NanAs nan) {
  std::vector<char> raw(t.bytes());
  cudaStream_t s = cuda::stream_of(ctx);
  if (!raw.empty()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(raw.data(), t.data, raw.size(), cudaMemcpyDeviceToHost, s), ctx.run.device);
    KILN_CUDA_CHECK(cudaStreamSynchronize(s), ctx.run.device);
  }
  std::vector<int64_t> out(static_cast<size_t>(t.size()));
  dispatch_dtype(t.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* p = reinterpret_cast<const T*>(raw.data());
    for (size_t i = 0; i < out.size(); ++i) {
      double x;
      if constexpr (std::is_same_v<T, Half>) {
        x = half_to_float(p[i]);
      } else if constexpr (std::is_same_v<T, BFloat16>) {
        x = bf16_to_float(p[i]);
      } else if constexpr (std::is_same_v<T, uint64_t>) {
        out[i] = static_cast<int64_t>(std::min<uint64_t>(p[i], std::numeric_limits<int64_t>::max()));
        continue;
      } else if constexpr (std::is_integral_v<T>) {
        out[i] = static_cast<int64_t>(p[i]);
        continue;
      } else {
        x = static_cast<double>(p[i]);
      }
      if (std::isnan(x)) {
        out[i] = nan == NanAs::kZero ? 0 : std::numeric_limits<int64_t>::min();
      } else {
        out[i] = static_cast<int64_t>(std::clamp(x, -9.2e18, 9.2e18));
      }
    }
  });
  return out;
}

// take's resolution (backends/cpu/matrix.cc).
void resolve_take(std::vector<int64_t>& ids, int64_t n, TakeMode mode) {
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t& k = ids[i];
    switch (mode) {
      case TakeMode::kClip: k = std::clamp<int64_t>(k, 0, n - 1); break;
      case TakeMode::kWrap: k = (k % n + n) % n; break;
      case TakeMode::kRaise:
        KILN_CHECK(k >= -n && k < n, IndexError,
                   "take: index {} (element {} of indices) is out of range for an axis of length {}", k, i, n);
        if (k < 0) k += n;
        break;
    }
  }
}

// pick's resolution (backends/cpu/nn_softmax.cc).
void resolve_pick(std::vector<int64_t>& ids, int64_t n, TakeMode mode) {
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t& k = ids[i];
    switch (mode) {
      case TakeMode::kClip: k = std::clamp<int64_t>(k, 0, std::max<int64_t>(n - 1, 0)); break;
      case TakeMode::kWrap: k = n > 0 ? ((k % n) + n) % n : 0; break;
      case TakeMode::kRaise:
        KILN_CHECK(k >= -n && k < n, IndexError, "index {} at position {} is out of range for axis length {}", k, i, n);
        if (k < 0) k += n;
        break;
    }
  }
}

// The resolved ids on the device, for this op.
struct DeviceIds {
  cuda::Scratch scratch;
  DeviceIds(const KernelContext& ctx, const std::vector<int64_t>& ids)
      : scratch(ctx.run.device, std::max<size_t>(1, ids.size()) * sizeof(int64_t)) {
    if (!ids.empty())
      KILN_CUDA_CHECK(cudaMemcpyAsync(scratch.get(), ids.data(), ids.size() * sizeof(int64_t), cudaMemcpyHostToDevice,
                                      cuda::stream_of(ctx)),
                      ctx.run.device);
    // The host vector must outlive the copy: wait for it here.
    KILN_CUDA_CHECK(cudaStreamSynchronize(cuda::stream_of(ctx)), ctx.run.device);
  }
  const int64_t* get() const { return static_cast<const int64_t*>(scratch.get()); }
};

struct Split3 {
  int64_t outer = 1, n = 1, inner = 1;
};

Split3 split(const Shape& s, int axis) {
  Split3 d;
  d.n = s[axis];
  for (int i = 0; i < axis; ++i) d.outer *= s[i];
  for (int i = axis + 1; i < s.ndim(); ++i) d.inner *= s[i];
  return d;
}

void zero(const KernelContext& ctx, const TensorView& t) {
  if (t.bytes() > 0)
    KILN_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), cuda::stream_of(ctx)), ctx.run.device);
}

void take(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<TakeAttrs>();
  const TensorView& x = in[0];
  Split3 d = split(x.shape, normalize_axis(a.axis, x.shape.ndim(), "take"));
  if (out[0].size() == 0) return;
  std::vector<int64_t> ids = read_indices(ctx, in[1], NanAs::kOutOfRange);
  resolve_take(ids, d.n, a.mode);
  DeviceIds dev_ids(ctx, ids);
  KILN_CUDA_LAUNCH(cuda::launch_take(x.data, out[0].data, dev_ids.get(), d.outer, d.n, static_cast<int64_t>(ids.size()),
                                     d.inner, static_cast<int>(dtype_size(x.dtype)), cuda::stream_of(ctx)),
                   ctx);
}

// (out_grad, indices) -> zeros of data_shape with out_grad added at the picked rows
void take_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<TakeBackwardAttrs>();
  cuda::require_f32(in.first(1), out);
  Split3 d = split(out[0].shape, normalize_axis(a.axis, out[0].shape.ndim(), "take"));
  zero(ctx, out[0]);
  if (in[0].size() == 0) return;
  std::vector<int64_t> ids = read_indices(ctx, in[1], NanAs::kOutOfRange);
  resolve_take(ids, d.n, a.mode);
  DeviceIds dev_ids(ctx, ids);
  KILN_CUDA_LAUNCH(cuda::launch_take_backward(in[0].ptr<float>(), out[0].ptr<float>(), dev_ids.get(), d.outer, d.n,
                                              static_cast<int64_t>(ids.size()), d.inner, cuda::stream_of(ctx)),
                   ctx);
}

// Embedding: whole rows of the weight, ids checked as on every backend.
void embedding(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<EmbeddingAttrs>();
  if (out[0].size() == 0) return;
  std::vector<int64_t> ids = read_indices(ctx, in[0], NanAs::kOutOfRange);
  for (size_t i = 0; i < ids.size(); ++i) check_embedding_id(ids[i], i, a.input_dim);
  DeviceIds dev_ids(ctx, ids);
  KILN_CUDA_LAUNCH(cuda::launch_take(in[1].data, out[0].data, dev_ids.get(), 1, a.input_dim,
                                     static_cast<int64_t>(ids.size()), a.output_dim,
                                     static_cast<int>(dtype_size(in[1].dtype)), cuda::stream_of(ctx)),
                   ctx);
}

void one_hot(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<OneHotAttrs>();
  if (out[0].size() == 0) return;
  std::vector<int64_t> ids = read_indices(ctx, in[0], NanAs::kOutOfRange);
  DeviceIds dev_ids(ctx, ids);
  KILN_CUDA_LAUNCH(cuda::launch_one_hot(out[0].data, static_cast<int>(out[0].dtype), dev_ids.get(),
                                        static_cast<int64_t>(ids.size()), a.depth, a.on_value, a.off_value,
                                        cuda::stream_of(ctx)),
                   ctx);
}

void pick(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<PickAttrs>();
  cuda::require_f32(in.first(1), out);
  AxisSplit d = split_at_axis(in[0].shape, normalize_axis(*a.axis, in[0].shape.ndim(), "pick"));
  std::vector<int64_t> ids = read_indices(ctx, in[1], NanAs::kZero);
  resolve_pick(ids, d.n, a.mode);
  if (d.n == 0) KILN_CHECK(ids.empty(), IndexError, "pick: cannot pick from an empty axis");
  DeviceIds dev_ids(ctx, ids);
  KILN_CUDA_LAUNCH(cuda::launch_pick(in[0].ptr<float>(), out[0].ptr<float>(), dev_ids.get(), d.outer, d.n, d.inner,
                                     false, cuda::stream_of(ctx)),
                   ctx);
}

// (out_grad, index) -> zeros of data_shape with out_grad at the picked elements
void pick_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<PickBackwardAttrs>();
  cuda::require_f32(in.first(1), out);
  AxisSplit d = split_at_axis(a.data_shape, normalize_axis(*a.axis, a.data_shape.ndim(), "pick"));
  std::vector<int64_t> ids = read_indices(ctx, in[1], NanAs::kZero);
  resolve_pick(ids, d.n, a.mode);
  zero(ctx, out[0]);
  DeviceIds dev_ids(ctx, ids);
  KILN_CUDA_LAUNCH(cuda::launch_pick(in[0].ptr<float>(), out[0].ptr<float>(), dev_ids.get(), d.outer, d.n, d.inner,
                                     true, cuda::stream_of(ctx)),
                   ctx);
}

}  // namespace

// softmax with use_length (backends/cuda/nn.cc's softmax kernel calls it):
// the lengths read as the CPU reads them (truncated, NaN as 0), then clamped
// per row on the device.
void softmax_with_length(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const int dtype = cuda::require_float(in.first(1), out);
  const auto& a = ctx.attrs.as<SoftmaxAttrs>();
  Split3 d = split(in[0].shape, normalize_axis(a.axis, in[0].shape.ndim(), "softmax"));
  if (out[0].size() == 0) return;
  DeviceIds lengths(ctx, read_indices(ctx, in[1], NanAs::kZero));
  const float inv_t = a.temperature ? static_cast<float>(1.0 / *a.temperature) : 1.0f;
  KILN_CUDA_LAUNCH(cuda::launch_softmax_length(dtype, in[0].data, lengths.get(), out[0].data, d.outer, d.n, d.inner,
                                               inv_t, cuda::stream_of(ctx)),
                   ctx);
}

void register_cuda_index_kernels() {
  constexpr DeviceKind k = DeviceKind::kCUDA;
  register_kernel(OpId::kTake, k, take, HalfSupport::kAny);
  register_kernel(OpId::kTakeBackward, k, take_backward);
  register_kernel(OpId::kEmbedding, k, embedding);
  register_kernel(OpId::kOneHot, k, one_hot, HalfSupport::kAny);
  register_kernel(OpId::kPick, k, pick);
  register_kernel(OpId::kPickBackward, k, pick_backward);
}

}  // namespace kiln
