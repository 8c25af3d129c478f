// CPU kernels: LayerNorm and _backward_LayerNorm, each one pass per row
// (semantics in ir/ops/layer_norm.h).
//
// data is seen as rows of n elements along the axis: row r = (o, c) of the
// [outer, n, inner] view starts at o * n * inner + c and steps by inner
// (inner == 1, the usual last-axis case, runs a contiguous loop). Rows are
// independent in the forward op and for d_data. d_gamma and d_beta sum over
// rows: rows are cut into blocks whose size depends on the shape only, each
// block sums into its own partial, and the partials are added in block order,
// so the result does not depend on the thread count. Sums run in the data's
// dtype (float32 or float64).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/parallel.h"
#include "ir/ops/layer_norm.h"
#include "runtime/kernel.h"

namespace kiln::cpu {
namespace {

template <typename Fn>
void dispatch_float(DType t, Fn&& fn) {
  if (t == DType::kFloat32) return fn(float{});
  if (t == DType::kFloat64) return fn(double{});
  throw InternalError(fmt::format("internal error: LayerNorm kernel reached with dtype {}", t));
}

struct Rows {
  int64_t count, n, inner;
  int64_t start(int64_t r) const { return (r / inner) * n * inner + r % inner; }
};

Rows rows_of(const LayerNormAttrs& a, const Shape& data) {
  LayerNormDims d = layer_norm_dims(a, data);
  return {d.outer * d.inner, d.n, d.inner};
}

int64_t row_grain(int64_t n) { return std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(n, 1)); }

// ---- forward

template <typename T, bool kUnit>
void normalize_row(const T* x, const T* gamma, const T* beta, T* y, T* mean_out, T* std_out, int64_t n, int64_t stride,
                   T eps) {
  auto at = [&](int64_t i) { return kUnit ? i : i * stride; };
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[at(i)];
  const T mean = s / static_cast<T>(n);
  T v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t i = 0; i < n; ++i) {
    T d = x[at(i)] - mean;
    v += d * d;
  }
  const T sd = std::sqrt(v / static_cast<T>(n) + eps);
  const T inv = T(1) / sd;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[at(i)] = gamma[i] * ((x[at(i)] - mean) * inv) + beta[i];
  *mean_out = mean;
  *std_out = sd;
}

template <typename T>
void layer_norm_typed(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<LayerNormAttrs>();
  const Rows rows = rows_of(a, in[0].shape);
  const T *x = in[0].ptr<T>(), *gamma = in[1].ptr<T>(), *beta = in[2].ptr<T>();
  T *y = out[0].ptr<T>(), *mean = out[1].ptr<T>(), *sd = out[2].ptr<T>();
  const T eps = static_cast<T>(a.eps);
  parallel_for(
      ctx.run.num_threads, rows.count,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t s = rows.start(r);
          if (rows.inner == 1)
            normalize_row<T, true>(x + s, gamma, beta, y + s, mean + r, sd + r, rows.n, 1, eps);
          else
            normalize_row<T, false>(x + s, gamma, beta, y + s, mean + r, sd + r, rows.n, rows.inner, eps);
        }
      },
      row_grain(rows.n));
}

void layer_norm_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (out[0].size() == 0) return;
  dispatch_float(in[0].dtype, [&](auto tag) { layer_norm_typed<decltype(tag)>(ctx, in, out); });
}

// ---- backward

// d_data of one row; adds the row's d_gamma and d_beta terms into pg, pb.
template <typename T, bool kUnit>
void backward_row(const T* dy, const T* x, const T* gamma, T mean, T sd, T* dx, T* pg, T* pb, int64_t n,
                  int64_t stride) {
  auto at = [&](int64_t i) { return kUnit ? i : i * stride; };
  const T inv = T(1) / sd;
  T sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
  for (int64_t i = 0; i < n; ++i) {
    T xhat = (x[at(i)] - mean) * inv;
    T g = dy[at(i)] * gamma[i];
    sum_g += g;
    sum_gx += g * xhat;
  }
  const T mg = sum_g / static_cast<T>(n), mgx = sum_gx / static_cast<T>(n);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    T xhat = (x[at(i)] - mean) * inv;
    T d = dy[at(i)];
    dx[at(i)] = (d * gamma[i] - mg - xhat * mgx) * inv;
    pg[i] += d * xhat;
    pb[i] += d;
  }
}

template <typename T>
void layer_norm_backward_typed(const KernelContext& ctx, std::span<const TensorView> in,
                               std::span<const TensorView> out) {
  const Rows rows = rows_of(ctx.attrs.as<LayerNormAttrs>(), in[1].shape);
  const T *dy = in[0].ptr<T>(), *x = in[1].ptr<T>(), *gamma = in[2].ptr<T>(), *mean = in[3].ptr<T>(),
          *sd = in[4].ptr<T>();
  T *dx = out[0].ptr<T>(), *dgamma = out[1].ptr<T>(), *dbeta = out[2].ptr<T>();
  const int64_t n = rows.n;
  // Blocks of at least 16 rows, at most 256 blocks: a function of the shape.
  const int64_t block = std::max<int64_t>(16, (rows.count + 255) / 256);
  const int64_t blocks = (rows.count + block - 1) / block;
  std::vector<T> partial(static_cast<size_t>(blocks * 2 * n), T(0));  // per block: [d_gamma | d_beta]
  parallel_for(
      ctx.run.num_threads, blocks,
      [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          T* pg = partial.data() + b * 2 * n;
          T* pb = pg + n;
          for (int64_t r = b * block; r < std::min(rows.count, (b + 1) * block); ++r) {
            const int64_t s = rows.start(r);
            if (rows.inner == 1)
              backward_row<T, true>(dy + s, x + s, gamma, mean[r], sd[r], dx + s, pg, pb, n, 1);
            else
              backward_row<T, false>(dy + s, x + s, gamma, mean[r], sd[r], dx + s, pg, pb, n, rows.inner);
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
          dgamma[i] = static_cast<T>(g);
          dbeta[i] = static_cast<T>(bsum);
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
  dispatch_float(in[1].dtype, [&](auto tag) { layer_norm_backward_typed<decltype(tag)>(ctx, in, out); });
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void register_cpu_layer_norm_kernels() {
  register_kernel(OpId::kLayerNorm, DeviceKind::kCPU, cpu::layer_norm_kernel);
  register_kernel(OpId::kLayerNormBackward, DeviceKind::kCPU, cpu::layer_norm_backward_kernel);
}

}  // namespace kiln
