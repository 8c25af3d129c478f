// CPU kernels: LayerNorm and _backward_LayerNorm, each one pass per row
// (semantics in ir/ops/layer_norm.h).
//
// data is seen as rows of n elements along the axis: row r = (o, c) of the
// [outer, n, inner] view starts at o * n * inner + c and steps by inner
// (inner == 1, the usual last-axis case, is worked on in place; rows that
// step by inner > 1 are copied into a contiguous per-thread buffer and the
// results copied back). Rows are
// independent in the forward op and for d_data. d_gamma and d_beta sum over
// rows: rows are cut into blocks whose size depends on the shape only, each
// block sums into its own partial, and the partials are added in block order,
// so the result does not depend on the thread count. Sums run in the data's
// dtype (float32 or float64), float16 and bfloat16 in float32.
//
// float16 and bfloat16 are taken natively (no widening adaptor): each row is
// converted into the per-thread float32 buffer as it is read, the float32 row
// code runs on it, and each result is rounded once as it is stored (gamma and
// beta are converted once per call, mean and std read back from 16 bits in
// the backward op). A 16-bit call's results are therefore exactly those of
// the float32 kernel on the converted inputs, each rounded once.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/layer_norm.h"
#include "runtime/kernel.h"

namespace kiln::cpu {
namespace {


struct Rows {
  int64_t count, n, inner;
  int64_t start(int64_t r) const { return (r / inner) * n * inner + r % inner; }
};

Rows rows_of(const LayerNormAttrs& a, const Shape& data) {
  LayerNormDims d = layer_norm_dims(a, data);
  return {d.outer * d.inner, d.n, d.inner};
}

int64_t row_grain(int64_t n) { return std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(n, 1)); }

// Whether rows of storage type S are worked on in place (contiguous rows of
// the compute type) or through a contiguous compute-type buffer.
template <typename S>
bool in_place(const Rows& rows) {
  return std::is_same_v<S, compute_t<S>> && rows.inner == 1;
}

// dst[i] = src[i * stride] as the compute type, for i < n.
template <typename S>
void gather_row(const S* src, int64_t stride, compute_t<S>* dst, int64_t n) {
  if (stride == 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = load(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = load(src[i * stride]);
  }
}

// dst[i * stride] = src[i] rounded to S, for i < n.
template <typename S>
void scatter_row(const compute_t<S>* src, S* dst, int64_t stride, int64_t n) {
  if (stride == 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = store<S>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * stride] = store<S>(src[i]);
  }
}

// gamma or beta (n elements) in the compute type: the array itself when S is
// that type, else converted into `copy`.
template <typename S>
const compute_t<S>* param_in_compute(const S* p, int64_t n, std::vector<compute_t<S>>& copy) {
  if constexpr (std::is_same_v<S, compute_t<S>>) {
    return p;
  } else {
    copy.resize(static_cast<size_t>(n));
    gather_row(p, 1, copy.data(), n);
    return copy.data();
  }
}

// ---- forward

// One contiguous row of n elements. Out of line (as backward_row), so that
// float32 and 16-bit calls run one compiled copy of the arithmetic.
template <typename T>
[[gnu::noinline]] void normalize_row(const T* x, const T* gamma, const T* beta, T* y, T* mean_out, T* std_out,
                                     int64_t n, T eps) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  const T mean = s / static_cast<T>(n);
  T v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t i = 0; i < n; ++i) {
    T d = x[i] - mean;
    v += d * d;
  }
  const T sd = std::sqrt(v / static_cast<T>(n) + eps);
  const T inv = T(1) / sd;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = gamma[i] * ((x[i] - mean) * inv) + beta[i];
  *mean_out = mean;
  *std_out = sd;
}

template <typename S>
void layer_norm_typed(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  using T = compute_t<S>;
  const auto& a = ctx.attrs.as<LayerNormAttrs>();
  const Rows rows = rows_of(a, in[0].shape);
  const S* x = in[0].ptr<S>();
  S *y = out[0].ptr<S>(), *mean = out[1].ptr<S>(), *sd = out[2].ptr<S>();
  std::vector<T> gamma_copy, beta_copy;
  const T* gamma = param_in_compute(in[1].ptr<S>(), rows.n, gamma_copy);
  const T* beta = param_in_compute(in[2].ptr<S>(), rows.n, beta_copy);
  const T eps = static_cast<T>(a.eps);
  const bool direct = in_place<S>(rows);
  parallel_for(
      ctx.run.num_threads, rows.count,
      [&](int64_t r0, int64_t r1) {
        std::vector<T> buf(direct ? 0 : static_cast<size_t>(2 * rows.n));
        T* xb = direct ? nullptr : buf.data();  // no arithmetic on an empty vector's null data
        T* yb = direct ? nullptr : xb + rows.n;
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t s = rows.start(r);
          T m, d;
          if constexpr (std::is_same_v<S, T>) {
            if (direct) {
              normalize_row<T>(x + s, gamma, beta, y + s, mean + r, sd + r, rows.n, eps);
              continue;
            }
          }
          gather_row(x + s, rows.inner, xb, rows.n);
          normalize_row<T>(xb, gamma, beta, yb, &m, &d, rows.n, eps);
          scatter_row(yb, y + s, rows.inner, rows.n);
          mean[r] = store<S>(m);
          sd[r] = store<S>(d);
        }
      },
      row_grain(rows.n));
}

void layer_norm_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (out[0].size() == 0) return;
  dispatch_floating(in[0].dtype, [&](auto tag) { layer_norm_typed<decltype(tag)>(ctx, in, out); });
}

// ---- backward

// d_data of one contiguous row; adds the row's d_gamma and d_beta terms into pg, pb.
template <typename T>
[[gnu::noinline]] void backward_row(const T* dy, const T* x, const T* gamma, T mean, T sd, T* dx, T* pg, T* pb,
                                    int64_t n) {
  const T inv = T(1) / sd;
  T sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
  for (int64_t i = 0; i < n; ++i) {
    T xhat = (x[i] - mean) * inv;
    T g = dy[i] * gamma[i];
    sum_g += g;
    sum_gx += g * xhat;
  }
  const T mg = sum_g / static_cast<T>(n), mgx = sum_gx / static_cast<T>(n);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    T xhat = (x[i] - mean) * inv;
    T d = dy[i];
    dx[i] = (d * gamma[i] - mg - xhat * mgx) * inv;
    pg[i] += d * xhat;
    pb[i] += d;
  }
}

template <typename S>
void layer_norm_backward_typed(const KernelContext& ctx, std::span<const TensorView> in,
                               std::span<const TensorView> out) {
  using T = compute_t<S>;
  const Rows rows = rows_of(ctx.attrs.as<LayerNormAttrs>(), in[1].shape);
  const S *dy = in[0].ptr<S>(), *x = in[1].ptr<S>(), *mean = in[3].ptr<S>(), *sd = in[4].ptr<S>();
  S *dx = out[0].ptr<S>(), *dgamma = out[1].ptr<S>(), *dbeta = out[2].ptr<S>();
  const int64_t n = rows.n;
  std::vector<T> gamma_copy;
  const T* gamma = param_in_compute(in[2].ptr<S>(), n, gamma_copy);
  const bool direct = in_place<S>(rows);
  // Blocks of at least 16 rows, at most 256 blocks: a function of the shape.
  const int64_t block = std::max<int64_t>(16, (rows.count + 255) / 256);
  const int64_t blocks = (rows.count + block - 1) / block;
  std::vector<T> partial(static_cast<size_t>(blocks * 2 * n), T(0));  // per block: [d_gamma | d_beta]
  parallel_for(
      ctx.run.num_threads, blocks,
      [&](int64_t b0, int64_t b1) {
        std::vector<T> buf(direct ? 0 : static_cast<size_t>(3 * n));
        T* dyb = direct ? nullptr : buf.data();
        T* xb = direct ? nullptr : dyb + n;
        T* dxb = direct ? nullptr : xb + n;
        for (int64_t b = b0; b < b1; ++b) {
          T* pg = partial.data() + b * 2 * n;
          T* pb = pg + n;
          for (int64_t r = b * block; r < std::min(rows.count, (b + 1) * block); ++r) {
            const int64_t s = rows.start(r);
            const T m = load(mean[r]), d = load(sd[r]);
            if constexpr (std::is_same_v<S, T>) {
              if (direct) {
                backward_row<T>(dy + s, x + s, gamma, m, d, dx + s, pg, pb, n);
                continue;
              }
            }
            gather_row(dy + s, rows.inner, dyb, n);
            gather_row(x + s, rows.inner, xb, n);
            backward_row<T>(dyb, xb, gamma, m, d, dxb, pg, pb, n);
            scatter_row(dxb, dx + s, rows.inner, n);
          }
        }
      },
      std::max<int64_t>(1, row_grain(n) / block));
  parallel_for(
      ctx.run.num_threads, n,
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          double g = 0, bsum = 0;
          for (int64_t b = 0; b < blocks; ++b) {
            g += static_cast<double>(partial[static_cast<size_t>(b * 2 * n + i)]);
            bsum += static_cast<double>(partial[static_cast<size_t>(b * 2 * n + n + i)]);
          }
          dgamma[i] = store<S>(static_cast<T>(g));
          dbeta[i] = store<S>(static_cast<T>(bsum));
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(blocks, 1)));
}

void layer_norm_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                                std::span<const TensorView> out) {
  if (out[0].size() == 0) {  // no rows (inference rejects n == 0): the parameter gradients are zero
    for (int k = 1; k < 3; ++k) std::fill_n(static_cast<char*>(out[k].data), out[k].bytes(), 0);
    return;
  }
  dispatch_floating(in[1].dtype, [&](auto tag) { layer_norm_backward_typed<decltype(tag)>(ctx, in, out); });
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void register_cpu_layer_norm_kernels() {
  register_kernel(OpId::kLayerNorm, DeviceKind::kCPU, cpu::layer_norm_kernel, HalfSupport::kAny);
  register_kernel(OpId::kLayerNormBackward, DeviceKind::kCPU, cpu::layer_norm_backward_kernel, HalfSupport::kAny);
}

}  // namespace kiln
