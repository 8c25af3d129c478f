// CPU kernels: softmax, log_softmax, pick, _kiln_softmax_cross_entropy and
// their backward ops (the pieces of classification losses).
//
// An array reduced along `axis` is seen as [outer, n, inner]. Rows are
// independent, so work splits over outer (inner == 1: contiguous rows) or
// over outer blocks of inner columns. Every result subtracts the row maximum
// before exponentiating. Index-like inputs (pick's index, the labels) are
// read into int64 first and checked serially, so a bad label throws before
// any parallel region starts.
//
// float16 and bfloat16 arrays are loaded into float32 (a row, or a block of
// columns, into a per-thread buffer), computed by the float32 code, and
// rounded once on store; row sums accumulate in double as for float32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/elemwise_math.h"
#include "backends/cpu/nn_kernels.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/nn.h"

namespace kiln::cpu {
namespace {

// ---- helpers

// y[j] = exp(x[j] * s - shift[j * shift_stride]) for j < n (shift_stride 0 or 1). y may be x.
template <typename T>
void exp_scaled(const T* x, T s, const T* shift, int64_t shift_stride, T* y, int64_t n) {
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (; j + kVecWidth <= n; j += kVecWidth) {
      VecF sh = shift_stride ? load_vec(shift + j) : splat(shift[0]);
      store_vec(y + j, vec_exp(load_vec(x + j) * s - sh));
    }
  }
  for (; j < n; ++j) y[j] = std::exp(x[j] * s - shift[j * shift_stride]);
}

template <typename T>
double sum_of(const T* x, int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += static_cast<double>(x[j]);
  return s;
}

template <typename T>
T max_scaled(const T* x, T s, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j] * s);
  return m;
}

// Calls fn(outer index, inner begin, inner end) over the [outer, n, inner] view in parallel.
template <typename F>
void for_rows(int threads, const AxisSplit& d, F fn) {
  const int64_t per_row = std::max<int64_t>(1, d.n);
  if (d.inner == 1) {
    parallel_for(
        threads, d.outer,
        [&](int64_t b, int64_t e) {
          for (int64_t o = b; o < e; ++o) fn(o, 0, 1);
        },
        std::max<int64_t>(1, kDefaultGrain / per_row));
    return;
  }
  // Column blocks of inner, so each thread keeps per-column state in a small buffer.
  constexpr int64_t kCols = 256;
  const int64_t blocks = (d.inner + kCols - 1) / kCols;
  parallel_for(
      threads, d.outer * blocks,
      [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t o = t / blocks, c0 = (t % blocks) * kCols;
          fn(o, c0, std::min(d.inner, c0 + kCols));
        }
      },
      std::max<int64_t>(1, kDefaultGrain / (per_row * kCols)));
}

// A per-thread float32 buffer of at least n elements; `slot` tells apart
// buffers used at once.
float* stage_buffer(int slot, int64_t n) {
  thread_local std::vector<float> buffers[3];
  auto& b = buffers[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

// rows x w elements, `stride` apart in `src`, into dense float32 `dst` (and back).
template <typename T>
void stage_in(const T* src, int64_t rows, int64_t stride, int64_t w, float* dst) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < w; ++c) dst[i * w + c] = load(src[i * stride + c]);
}
template <typename T>
void stage_out(const float* src, int64_t rows, int64_t stride, int64_t w, T* dst) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < w; ++c) dst[i * stride + c] = store<T>(src[i * w + c]);
}

double inverse_temperature(const SoftmaxAttrs& a) { return a.temperature ? 1.0 / *a.temperature : 1.0; }

// ---- softmax, log_softmax

// softmax over `n` rows of `w` columns, rows `stride` apart (one column of
// stride 1: a contiguous row). y may not be x.
template <typename T, bool kLog>
void softmax_block(const T* xb, T* yb, int64_t n, int64_t stride, int64_t w, T s) {
  if (w == 1 && stride == 1) {
    T m = max_scaled(xb, s, n);
    exp_scaled(xb, s, &m, 0, yb, n);
    double total = sum_of(yb, n);
    if constexpr (kLog) {
      T shift = m + static_cast<T>(std::log(total));
      for (int64_t j = 0; j < n; ++j) yb[j] = xb[j] * s - shift;
    } else {
      T inv = static_cast<T>(1.0 / total);
      for (int64_t j = 0; j < n; ++j) yb[j] *= inv;
    }
    return;
  }
  std::vector<T> m(static_cast<size_t>(w), -std::numeric_limits<T>::infinity());
  std::vector<double> total(static_cast<size_t>(w), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < w; ++c) m[c] = std::max(m[c], xb[i * stride + c] * s);
  for (int64_t i = 0; i < n; ++i) {
    T* yr = yb + i * stride;
    exp_scaled(xb + i * stride, s, m.data(), 1, yr, w);
    for (int64_t c = 0; c < w; ++c) total[c] += yr[c];
  }
  for (int64_t c = 0; c < w; ++c) total[c] = kLog ? static_cast<double>(m[c]) + std::log(total[c]) : 1.0 / total[c];
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = xb + i * stride;
    T* yr = yb + i * stride;
    for (int64_t c = 0; c < w; ++c)
      yr[c] = kLog ? xr[c] * s - static_cast<T>(total[c]) : yr[c] * static_cast<T>(total[c]);
  }
}

template <typename T, bool kLog>
void softmax_typed(const KernelContext& ctx, const TensorView& x, const TensorView& y) {
  using C = compute_t<T>;
  const auto& a = ctx.attrs.as<SoftmaxAttrs>();
  const AxisSplit d = split_at_axis(x.shape, normalize_axis(a.axis, x.shape.ndim(), "softmax"));
  const C s = static_cast<C>(inverse_temperature(a));
  for_rows(ctx.run.num_threads, d, [&](int64_t o, int64_t c0, int64_t c1) {
    const T* xb = x.ptr<T>() + o * d.n * d.inner + c0;
    T* yb = y.ptr<T>() + o * d.n * d.inner + c0;
    const int64_t w = c1 - c0;
    if constexpr (std::is_same_v<T, C>) {
      softmax_block<C, kLog>(xb, yb, d.n, d.inner, w, s);
    } else {
      float* xs = stage_buffer(0, d.n * w);
      float* ys = stage_buffer(1, d.n * w);
      stage_in(xb, d.n, d.inner, w, xs);
      softmax_block<C, kLog>(xs, ys, d.n, w, w, s);
      stage_out(ys, d.n, d.inner, w, yb);
    }
  });
}

std::vector<int64_t> read_indices(const TensorView& v);

// softmax with use_length: row (o, c) normalizes its first length[o, c]
// elements (clamped to [0, n]) and writes 0 after them.
template <typename T>
void softmax_length_typed(const KernelContext& ctx, const TensorView& x, const TensorView& length,
                          const TensorView& y) {
  const auto& a = ctx.attrs.as<SoftmaxAttrs>();
  const AxisSplit d = split_at_axis(x.shape, normalize_axis(a.axis, x.shape.ndim(), "softmax"));
  using C = compute_t<T>;
  const C s = static_cast<C>(inverse_temperature(a));
  const std::vector<int64_t> lengths = read_indices(length);
  parallel_for(
      ctx.run.num_threads, d.outer * d.inner,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t base = (r / d.inner) * d.n * d.inner + r % d.inner;
          const T* xr = x.ptr<T>() + base;
          T* yr = y.ptr<T>() + base;
          const int64_t len = std::clamp<int64_t>(lengths[static_cast<size_t>(r)], 0, d.n);
          C m = -std::numeric_limits<C>::infinity();
          for (int64_t j = 0; j < len; ++j) m = std::max(m, load(xr[j * d.inner]) * s);
          double total = 0;
          for (int64_t j = 0; j < len; ++j) total += std::exp(static_cast<double>(load(xr[j * d.inner]) * s - m));
          for (int64_t j = 0; j < d.n; ++j)
            yr[j * d.inner] = store<T>(
                j < len ? static_cast<C>(std::exp(static_cast<double>(load(xr[j * d.inner]) * s - m)) / total) : C(0));
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(d.n, 1)));
}

template <bool kLog>
void softmax_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (in.size() == 2) {  // use_length (softmax only: inference rejects it for log_softmax)
    return dispatch_floating(in[0].dtype,
                             [&](auto tag) { softmax_length_typed<decltype(tag)>(ctx, in[0], in[1], out[0]); });
  }
  dispatch_floating(in[0].dtype, [&](auto tag) { softmax_typed<decltype(tag), kLog>(ctx, in[0], out[0]); });
}

// softmax: dx = s * y * (dy - sum(dy * y));  log_softmax: dx = s * (dy - exp(y) * sum(dy)).
// Over `n` rows of `w` columns, rows `stride` apart. gx may be g.
template <typename T, bool kLog>
void softmax_backward_block(const T* g, const T* yb, T* gx, int64_t n, int64_t stride, int64_t w, T s) {
  if (w == 1 && stride == 1) {
    double dot = 0;
    for (int64_t i = 0; i < n; ++i) dot += kLog ? static_cast<double>(g[i]) : static_cast<double>(g[i]) * yb[i];
    const T sum = static_cast<T>(dot);
    for (int64_t i = 0; i < n; ++i) gx[i] = kLog ? s * (g[i] - std::exp(yb[i]) * sum) : s * yb[i] * (g[i] - sum);
    return;
  }
  std::vector<double> dot(static_cast<size_t>(w), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < w; ++c) {
      const int64_t k = i * stride + c;
      dot[c] += kLog ? static_cast<double>(g[k]) : static_cast<double>(g[k]) * yb[k];
    }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < w; ++c) {
      const int64_t k = i * stride + c;
      const T sum = static_cast<T>(dot[c]);
      gx[k] = kLog ? s * (g[k] - std::exp(yb[k]) * sum) : s * yb[k] * (g[k] - sum);
    }
  }
}

template <typename T, bool kLog>
void softmax_backward_typed(const KernelContext& ctx, const TensorView& dy, const TensorView& y, const TensorView& dx) {
  using C = compute_t<T>;
  const auto& a = ctx.attrs.as<SoftmaxAttrs>();
  const AxisSplit d = split_at_axis(y.shape, normalize_axis(a.axis, y.shape.ndim(), "softmax"));
  const C s = static_cast<C>(inverse_temperature(a));
  for_rows(ctx.run.num_threads, d, [&](int64_t o, int64_t c0, int64_t c1) {
    const int64_t base = o * d.n * d.inner + c0, w = c1 - c0;
    const T* g = dy.ptr<T>() + base;
    const T* yb = y.ptr<T>() + base;
    T* gx = dx.ptr<T>() + base;
    if constexpr (std::is_same_v<T, C>) {
      softmax_backward_block<C, kLog>(g, yb, gx, d.n, d.inner, w, s);
    } else {
      float* gs = stage_buffer(0, d.n * w);
      float* ys = stage_buffer(1, d.n * w);
      stage_in(g, d.n, d.inner, w, gs);
      stage_in(yb, d.n, d.inner, w, ys);
      softmax_backward_block<C, kLog>(gs, ys, gs, d.n, w, w, s);
      stage_out(gs, d.n, d.inner, w, gx);
    }
  });
}

template <bool kLog>
void softmax_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                             std::span<const TensorView> out) {
  dispatch_floating(in[0].dtype,
                    [&](auto tag) { softmax_backward_typed<decltype(tag), kLog>(ctx, in[0], in[1], out[0]); });
}

// ---- index inputs

// The values of an index array truncated toward zero (NaN reads as 0).
std::vector<int64_t> read_indices(const TensorView& v) {
  std::vector<int64_t> out(static_cast<size_t>(v.size()));
  auto copy = [&](const auto* p) {
    for (size_t i = 0; i < out.size(); ++i) {
      double x = static_cast<double>(load(p[i]));
      out[i] = std::isnan(x) ? 0 : static_cast<int64_t>(std::clamp(x, -9.2e18, 9.2e18));
    }
  };
  switch (v.dtype) {
    case DType::kFloat32:
      copy(v.ptr<float>());
      break;
    case DType::kFloat64:
      copy(v.ptr<double>());
      break;
    case DType::kFloat16:
      copy(v.ptr<Half>());
      break;
    case DType::kBfloat16:
      copy(v.ptr<BFloat16>());
      break;
    case DType::kInt32:
      copy(v.ptr<int32_t>());
      break;
    case DType::kInt64:
      copy(v.ptr<int64_t>());
      break;
    case DType::kUint8:
      copy(v.ptr<uint8_t>());
      break;
    case DType::kInt8:
      copy(v.ptr<int8_t>());
      break;
    default:
      KILN_ASSERT(!"index dtype not admitted by inference");
  }
  return out;
}

// Maps each index into [0, n) by `mode`; raise throws IndexError naming the first bad one.
void resolve_indices(std::vector<int64_t>& idx, int64_t n, TakeMode mode) {
  for (size_t i = 0; i < idx.size(); ++i) {
    int64_t& k = idx[i];
    switch (mode) {
      case TakeMode::kClip:
        k = std::clamp<int64_t>(k, 0, std::max<int64_t>(n - 1, 0));
        break;
      case TakeMode::kWrap:
        k = n > 0 ? ((k % n) + n) % n : 0;
        break;
      case TakeMode::kRaise:
        KILN_CHECK(k >= -n && k < n, IndexError, "index {} at position {} is out of range for axis length {}", k, i, n);
        if (k < 0) k += n;
        break;
    }
  }
}

// ---- pick

template <typename T>
void pick_typed(int threads, const AxisSplit& d, const std::vector<int64_t>& idx, const T* x, T* y) {
  parallel_for(threads, d.outer * d.inner, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / d.inner, c = t % d.inner;
      y[t] = x[(o * d.n + idx[static_cast<size_t>(t)]) * d.inner + c];
    }
  });
}

void pick_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<PickAttrs>();
  const AxisSplit d = split_at_axis(in[0].shape, normalize_axis(*a.axis, in[0].shape.ndim(), "pick"));
  std::vector<int64_t> idx = read_indices(in[1]);
  resolve_indices(idx, d.n, a.mode);
  if (d.n == 0) KILN_CHECK(idx.empty(), IndexError, "pick: cannot pick from an empty axis");
  const int threads = ctx.run.num_threads;
  switch (in[0].dtype) {
    case DType::kFloat32:
      return pick_typed(threads, d, idx, in[0].ptr<float>(), out[0].ptr<float>());
    case DType::kFloat64:
      return pick_typed(threads, d, idx, in[0].ptr<double>(), out[0].ptr<double>());
    case DType::kFloat16:  // 16-bit values are copied as they are
      return pick_typed(threads, d, idx, in[0].ptr<Half>(), out[0].ptr<Half>());
    case DType::kBfloat16:
      return pick_typed(threads, d, idx, in[0].ptr<BFloat16>(), out[0].ptr<BFloat16>());
    case DType::kInt32:
      return pick_typed(threads, d, idx, in[0].ptr<int32_t>(), out[0].ptr<int32_t>());
    case DType::kInt64:
      return pick_typed(threads, d, idx, in[0].ptr<int64_t>(), out[0].ptr<int64_t>());
    case DType::kUint8:
      return pick_typed(threads, d, idx, in[0].ptr<uint8_t>(), out[0].ptr<uint8_t>());
    case DType::kInt8:
      return pick_typed(threads, d, idx, in[0].ptr<int8_t>(), out[0].ptr<int8_t>());
    default:
      KILN_ASSERT(!"pick: dtype not admitted by inference");
  }
}

void pick_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<PickBackwardAttrs>();
  const AxisSplit d = split_at_axis(a.data_shape, normalize_axis(*a.axis, a.data_shape.ndim(), "pick"));
  std::vector<int64_t> idx = read_indices(in[1]);
  resolve_indices(idx, d.n, a.mode);
  dispatch_floating(out[0].dtype, [&](auto tag) {  // 16-bit gradients copied as they are
    using T = decltype(tag);
    const T* g = in[0].ptr<T>();
    T* gx = out[0].ptr<T>();
    parallel_for(
        ctx.run.num_threads, d.outer,
        [&](int64_t b, int64_t e) {
          std::fill(gx + b * d.n * d.inner, gx + e * d.n * d.inner, store<T>(compute_t<T>(0)));
          for (int64_t o = b; o < e; ++o)
            for (int64_t c = 0; c < d.inner; ++c) {
              const int64_t t = o * d.inner + c;
              gx[(o * d.n + idx[static_cast<size_t>(t)]) * d.inner + c] = g[t];
            }
        },
        std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, d.n * d.inner)));
  });
}

// ---- softmax cross-entropy

// Labels as row indices into [0, classes); throws ValueError for the first label outside.
std::vector<int64_t> read_labels(const TensorView& label, int64_t classes) {
  std::vector<int64_t> idx = read_indices(label);
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] >= 0 && idx[i] < classes) continue;
    double value = 0;
    dispatch_dtype(label.dtype, [&](auto tag) {
      using L = decltype(tag);
      if constexpr (std::is_arithmetic_v<L> || kIsHalfType<L>) value = static_cast<double>(load(label.ptr<L>()[i]));
    });
    throw ValueError(fmt::format("label {} at position {} is out of range for {} classes (expected 0 to {})", value, i,
                                 classes, classes - 1));
  }
  return idx;
}

// Rows of x [N, C] (float32 or float64 here; 16-bit callers stage rows):
// the loss per row, or (dy given) the gradient rows into `grad`.
template <typename T>
void cross_entropy_row(const T* xr, int64_t classes, int64_t k, const T* dy, T* buf, T* loss, T* grad) {
  const T one = 1;
  T m = max_scaled(xr, one, classes);
  T* er = dy ? grad : buf;  // the backward writes exps into its output row
  exp_scaled(xr, one, &m, 0, er, classes);
  const double total = sum_of(er, classes);
  if (!dy) {
    *loss = static_cast<T>(static_cast<double>(m) + std::log(total) - static_cast<double>(xr[k]));
    return;
  }
  const T g = *dy;
  const T scale = static_cast<T>(static_cast<double>(g) / total);
  for (int64_t c = 0; c < classes; ++c) er[c] *= scale;
  er[k] -= g;
}

template <typename T>
void cross_entropy_typed(const KernelContext& ctx, const TensorView& x, const std::vector<int64_t>& label,
                         const TensorView* dy, const TensorView& out) {
  using C = compute_t<T>;
  const int64_t rows = x.shape[0], classes = x.shape[1];
  parallel_for(
      ctx.run.num_threads, rows,
      [&](int64_t b, int64_t e) {
        std::vector<C> buf(static_cast<size_t>(classes));
        std::vector<C> staged(std::is_same_v<T, C> ? 0 : static_cast<size_t>(2 * classes));
        for (int64_t r = b; r < e; ++r) {
          const T* xr = x.ptr<T>() + r * classes;
          const int64_t k = label[static_cast<size_t>(r)];
          if constexpr (std::is_same_v<T, C>) {
            if (dy)
              cross_entropy_row<C>(xr, classes, k, dy->ptr<T>() + r, buf.data(), nullptr, out.ptr<T>() + r * classes);
            else
              cross_entropy_row<C>(xr, classes, k, nullptr, buf.data(), out.ptr<T>() + r, nullptr);
          } else {
            C* xs = staged.data();
            C* gs = xs + classes;
            for (int64_t c = 0; c < classes; ++c) xs[c] = load(xr[c]);
            const C g = dy ? load(dy->ptr<T>()[r]) : C(0);
            C loss = 0;
            cross_entropy_row<C>(xs, classes, k, dy ? &g : nullptr, buf.data(), &loss, gs);
            if (!dy) {
              out.ptr<T>()[r] = store<T>(loss);
              continue;
            }
            T* gr = out.ptr<T>() + r * classes;
            for (int64_t c = 0; c < classes; ++c) gr[c] = store<T>(gs[c]);
          }
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(classes, 1)));
}

void cross_entropy_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  std::vector<int64_t> label = read_labels(in[1], in[0].shape[1]);
  dispatch_floating(in[0].dtype,
                    [&](auto tag) { cross_entropy_typed<decltype(tag)>(ctx, in[0], label, nullptr, out[0]); });
}

// (out_grad [N], data [N, C], label) -> (softmax(data) - onehot(label)) * out_grad[:, None]
void cross_entropy_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                                   std::span<const TensorView> out) {
  std::vector<int64_t> label = read_labels(in[2], in[1].shape[1]);
  dispatch_floating(in[1].dtype,
                    [&](auto tag) { cross_entropy_typed<decltype(tag)>(ctx, in[1], label, &in[0], out[0]); });
}

}  // namespace

void register_nn_softmax_kernels() {
  constexpr auto kAny = HalfSupport::kAny;
  register_kernel(OpId::kSoftmax, DeviceKind::kCPU, softmax_kernel<false>, kAny);
  register_kernel(OpId::kLogSoftmax, DeviceKind::kCPU, softmax_kernel<true>, kAny);
  register_kernel(OpId::kSoftmaxBackward, DeviceKind::kCPU, softmax_backward_kernel<false>, kAny);
  register_kernel(OpId::kLogSoftmaxBackward, DeviceKind::kCPU, softmax_backward_kernel<true>, kAny);
  register_kernel(OpId::kPick, DeviceKind::kCPU, pick_kernel, kAny);
  register_kernel(OpId::kPickBackward, DeviceKind::kCPU, pick_backward_kernel, kAny);
  register_kernel(OpId::kSoftmaxCrossEntropy, DeviceKind::kCPU, cross_entropy_kernel, kAny);
  register_kernel(OpId::kSoftmaxCrossEntropyBackward, DeviceKind::kCPU, cross_entropy_backward_kernel, kAny);
}

}  // namespace kiln::cpu
