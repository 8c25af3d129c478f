// CPU kernels: _kiln_attention and _backward_kiln_attention, flash-style
// (semantics in ir/ops/attention.h).
//
// Forward: one task per (batch row, block of kBr queries). It walks the key
// blocks of kBc keys its queries may see (causal: up to the last query's
// last allowed key; rows of a block that see none of a tile skip it),
// computes the tile S = q k^T, and keeps per query the running maximum m of
// scale * S, the running sum l of exp(scale * S - m) and the unnormalized
// output, rescaled by exp(m_old - m_new) when m grows. At the end out = acc / l
// and lse = m + log l. Nothing larger than one tile exists per thread.
//
// On a tile the causal diagonal crosses, every product (forward and
// backward) skips the register blocks that lie wholly past it (tile::Mask):
// about half of a diagonal tile's products, a third of all of them at T = 128.
//
// Backward: one task per batch row (its dq, dk, dv are then written by one
// thread, in a fixed order: results do not depend on the thread count). Key
// blocks outside, query blocks inside, skipping tiles the causal rule masks
// entirely; per tile P = exp(scale * S - lse) is recomputed from the saved
// lse, dv += P^T dout, dS = P * (dout v^T - Di) * scale with
// Di = rowsum(dout * out) - dlse, dq += dS k, dk += dS^T q.
//
// The tile products run tile::matmul_add (backends/cpu/attention_tile.h). In
// float32 and float64, accumulating in the data's dtype. float16/bfloat16
// calls run the float32 code on float32 copies of one batch row at a time
// (per thread: no whole-array temporaries), lse and dlse being float32
// already; the results are those of the float32 kernel on the converted
// inputs, rounded once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/attention_tile.h"
#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/elemwise_math.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/attention.h"
#include "runtime/kernel.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kBr = 64;  // queries per block
constexpr int64_t kBc = 64;  // keys per block

template <typename Fn>
void dispatch_float(DType t, Fn&& fn) {
  if (t == DType::kFloat32) return fn(float{});
  if (t == DType::kFloat64) return fn(double{});
  throw InternalError(fmt::format("internal error: attention kernel reached with dtype {}", t));
}

AttentionDims dims_of(const KernelContext& ctx, const TensorView& q, const TensorView& k, const TensorView& v) {
  return attention_dims(ctx.attrs.as<AttentionAttrs>(), q.shape, k.shape, v.shape);
}

// Keys of block [kb, kb + nc) that query i sees: [kb, kb + visible).
int64_t visible(const AttentionDims& d, int64_t i, int64_t kb, int64_t nc) {
  return std::clamp<int64_t>(d.allowed(i) - kb, 0, nc);
}

// y[j] = exp(x[j] * s - shift) for j < n. y may be x.
template <typename T>
void exp_shifted(const T* x, T s, T shift, T* y, int64_t n) {
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (; j + kVecWidth <= n; j += kVecWidth) store_vec(y + j, vec_exp(load_vec(x + j) * s - shift));
  }
  for (; j < n; ++j) y[j] = std::exp(x[j] * s - shift);
}

// max of x[j] * s over j < n (-inf for n = 0); NaNs are passed over, as by
// std::max with the running maximum first.
template <typename T>
T max_scaled(const T* x, T s, int64_t n) {
  T mx = -std::numeric_limits<T>::infinity();
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    VecF m = splat(mx);
    for (; j + kVecWidth <= n; j += kVecWidth) {
      VecF v = load_vec(x + j) * s;
      m = v > m ? v : m;
    }
    for (int l = 0; l < kVecWidth; ++l) mx = std::max(mx, m[l]);
  }
  for (; j < n; ++j) mx = std::max(mx, x[j] * s);
  return mx;
}

template <typename T>
T sum_of(const T* x, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += x[j];
  return s;
}

// Query blocks of at most this many rows take their scores as dot products
// with k's rows; larger ones transpose the key tile once and run the
// register-blocked product (one generated token: Tq = 1).
constexpr int64_t kDotRows = 4;

// The causal mask of the tile of queries [i0, i0 + nr) and keys
// [kb, kb + nc), in the tile's coordinates: (r, c) is visible iff
// c < r + diag. None where every query sees every key of the tile.
tile::Mask tile_mask(const AttentionDims& d, tile::Mask::Kind kind, int64_t i0, int64_t kb, int64_t nc) {
  const int64_t diag = d.allowed(i0) - kb;  // allowed(i0 + r) = allowed(i0) + r below tk
  if (!d.causal || diag >= nc) return {};
  return {kind, diag};
}

// s[r][c] = q_r . k_c for a block of nr queries and nc keys (kt: the key
// tile transposed, [d][kBc], read only when nr > kDotRows). Forward and
// backward share it, so they compute the same scores. Scores the causal
// mask hides may be left 0.
template <typename T>
void scores(const AttentionDims& d, int64_t i0, int64_t kb, int64_t nr, int64_t nc, const T* q, const T* k,
            const T* kt, T* s) {
  if (nr <= kDotRows) return tile::dot_rows(nr, d.d, nc, q, d.d, k, d.d, s, kBc);
  std::fill(s, s + nr * kBc, T(0));
  tile::matmul_add(nr, d.d, nc, q, d.d, kt, kBc, s, kBc, tile_mask(d, tile::Mask::kColumns, i0, kb, nc));
}

// ---- forward

template <typename T>
struct ForwardScratch {
  std::vector<T> kt, s, acc, m, l;
  explicit ForwardScratch(const AttentionDims& d)
      : kt(static_cast<size_t>(d.d * kBc)),
        s(static_cast<size_t>(kBr * kBc)),
        acc(static_cast<size_t>(kBr * d.dv)),
        m(kBr),
        l(kBr) {}
};

// Rows [i0, i0 + nr) of one batch row: q [tq, d], k [tk, d], v [tk, dv] -> o [tq, dv], lse [tq].
template <typename T>
void forward_block(const AttentionDims& d, const T* q, const T* k, const T* v, T* o, T* lse, int64_t i0, int64_t nr,
                   ForwardScratch<T>& w) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const T scale = static_cast<T>(d.scale);
  std::fill(w.acc.begin(), w.acc.begin() + nr * d.dv, T(0));
  std::fill(w.m.begin(), w.m.end(), kNegInf);
  std::fill(w.l.begin(), w.l.end(), T(0));
  const int64_t kend = d.allowed(i0 + nr - 1);
  for (int64_t kb = 0; kb < kend; kb += kBc) {
    const int64_t nc = std::min(kBc, kend - kb);
    if (nr > kDotRows) tile::transpose(nc, d.d, k + kb * d.d, d.d, w.kt.data(), kBc);
    T* s = w.s.data();
    scores(d, i0, kb, nr, nc, q + i0 * d.d, k + kb * d.d, w.kt.data(), s);
    for (int64_t r = 0; r < nr; ++r) {
      T* row = s + r * kBc;
      const int64_t nv = visible(d, i0 + r, kb, nc);
      if (nv == 0) {
        std::fill(row, row + nc, T(0));
        continue;
      }
      const T m_new = std::max(w.m[r], max_scaled(row, scale, nv));
      const T alpha = std::exp(w.m[r] - m_new);  // 0 on the first visible tile
      exp_shifted(row, scale, m_new, row, nv);
      std::fill(row + nv, row + nc, T(0));
      w.l[r] = w.l[r] * alpha + sum_of(row, nv);
      w.m[r] = m_new;
      if (alpha != T(1)) {
        T* a = w.acc.data() + r * d.dv;
#pragma omp simd
        for (int64_t e = 0; e < d.dv; ++e) a[e] *= alpha;
      }
    }
    tile::matmul_add(nr, nc, d.dv, s, kBc, v + kb * d.dv, d.dv, w.acc.data(), d.dv,
                     tile_mask(d, tile::Mask::kDepthBelow, i0, kb, nc));
  }
  for (int64_t r = 0; r < nr; ++r) {
    const T l = w.l[r];
    const T inv = l > 0 ? T(1) / l : T(0);
    const T* a = w.acc.data() + r * d.dv;
    T* out = o + (i0 + r) * d.dv;
#pragma omp simd
    for (int64_t e = 0; e < d.dv; ++e) out[e] = a[e] * inv;
    lse[i0 + r] = l > 0 ? w.m[r] + std::log(l) : kNegInf;
  }
}

template <typename T>
void attention_typed(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const AttentionDims d = dims_of(ctx, in[0], in[1], in[2]);
  const T *q = in[0].ptr<T>(), *k = in[1].ptr<T>(), *v = in[2].ptr<T>();
  T *o = out[0].ptr<T>(), *lse = out[1].ptr<T>();
  const int64_t blocks = (d.tq + kBr - 1) / kBr;
  // A task is worth a thread when its tiles hold a few thousand products.
  const int64_t work = std::max<int64_t>(1, std::min(d.tq, kBr) * d.tk * (d.d + d.dv));
  parallel_for(
      ctx.run.num_threads, d.batch * blocks,
      [&](int64_t t0, int64_t t1) {
        ForwardScratch<T> w(d);
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t b = t / blocks, i0 = (t % blocks) * kBr;
          forward_block(d, q + b * d.tq * d.d, k + b * d.tk * d.d, v + b * d.tk * d.dv, o + b * d.tq * d.dv,
                        lse + b * d.tq, i0, std::min(kBr, d.tq - i0), w);
        }
      },
      std::max<int64_t>(1, (1 << 16) / work));
}

// ---- float16 / bfloat16 through per-row float32 copies

template <typename T>
void widen_into(const T* src, float* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = load(src[i]);
}

template <typename T>
void narrow_into(const float* src, T* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = store<T>(src[i]);
}

template <typename T>
void attention_16bit(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const AttentionDims d = dims_of(ctx, in[0], in[1], in[2]);
  const T *q = in[0].ptr<T>(), *k = in[1].ptr<T>(), *v = in[2].ptr<T>();
  T* o = out[0].ptr<T>();
  float* lse = out[1].ptr<float>();
  const int64_t blocks = (d.tq + kBr - 1) / kBr;
  const int64_t work = std::max<int64_t>(1, std::min(d.tq, kBr) * d.tk * (d.d + d.dv));
  parallel_for(
      ctx.run.num_threads, d.batch * blocks,
      [&](int64_t t0, int64_t t1) {
        ForwardScratch<float> w(d);
        std::vector<float> qf(static_cast<size_t>(d.tq * d.d)), kf(static_cast<size_t>(d.tk * d.d)),
            vf(static_cast<size_t>(d.tk * d.dv)), of(static_cast<size_t>(d.tq * d.dv));
        int64_t row = -1;  // the batch row whose keys and values kf, vf hold
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t b = t / blocks, i0 = (t % blocks) * kBr, nr = std::min(kBr, d.tq - i0);
          if (b != row) {
            widen_into(k + b * d.tk * d.d, kf.data(), d.tk * d.d);
            widen_into(v + b * d.tk * d.dv, vf.data(), d.tk * d.dv);
            row = b;
          }
          widen_into(q + (b * d.tq + i0) * d.d, qf.data() + i0 * d.d, nr * d.d);
          forward_block(d, qf.data(), kf.data(), vf.data(), of.data(), lse + b * d.tq, i0, nr, w);
          narrow_into(of.data() + i0 * d.dv, o + (b * d.tq + i0) * d.dv, nr * d.dv);
        }
      },
      std::max<int64_t>(1, (1 << 16) / work));
}

void attention_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (out[0].size() == 0 && out[1].size() == 0) return;
  if (in[0].dtype == DType::kBfloat16) return attention_16bit<BFloat16>(ctx, in, out);
  if (in[0].dtype == DType::kFloat16) return attention_16bit<Half>(ctx, in, out);
  dispatch_float(in[0].dtype, [&](auto tag) { attention_typed<decltype(tag)>(ctx, in, out); });
}

// ---- backward

template <typename T>
struct BackwardScratch {
  std::vector<T> kt, vt, s, dp, di;
  explicit BackwardScratch(const AttentionDims& d)
      : kt(static_cast<size_t>(d.d * kBc)),
        vt(static_cast<size_t>(d.dv * kBc)),
        s(static_cast<size_t>(kBr * kBc)),
        dp(static_cast<size_t>(kBr * kBc)),
        di(static_cast<size_t>(d.tq)) {}
};

// One batch row: dq [tq, d], dk [tk, d], dv [tk, dv] from dout, dlse, q, k, v, out, lse.
template <typename T>
void backward_row(const AttentionDims& d, const T* dout, const T* dlse, const T* q, const T* k, const T* v, const T* o,
                  const T* lse, T* dq, T* dk, T* dv, BackwardScratch<T>& w) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const T scale = static_cast<T>(d.scale);
  std::fill(dq, dq + d.tq * d.d, T(0));
  std::fill(dk, dk + d.tk * d.d, T(0));
  std::fill(dv, dv + d.tk * d.dv, T(0));
  for (int64_t i = 0; i < d.tq; ++i) {
    const T *g = dout + i * d.dv, *y = o + i * d.dv;
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t e = 0; e < d.dv; ++e) s += g[e] * y[e];
    w.di[i] = s - dlse[i];
  }
  for (int64_t kb = 0; kb < d.tk; kb += kBc) {
    const int64_t nc = std::min(kBc, d.tk - kb);
    tile::transpose(nc, d.d, k + kb * d.d, d.d, w.kt.data(), kBc);
    tile::transpose(nc, d.dv, v + kb * d.dv, d.dv, w.vt.data(), kBc);
    for (int64_t i0 = 0; i0 < d.tq; i0 += kBr) {
      const int64_t nr = std::min(kBr, d.tq - i0);
      if (visible(d, i0 + nr - 1, kb, nc) == 0) continue;  // every row of the block is masked here
      T *s = w.s.data(), *dp = w.dp.data();
      scores(d, i0, kb, nr, nc, q + i0 * d.d, k + kb * d.d, w.kt.data(), s);
      for (int64_t r = 0; r < nr; ++r) {
        T* row = s + r * kBc;
        const int64_t nv = visible(d, i0 + r, kb, nc);
        const T shift = lse[i0 + r];
        if (shift == kNegInf) {
          std::fill(row, row + nc, T(0));
          continue;
        }
        exp_shifted(row, scale, shift, row, nv);
        std::fill(row + nv, row + nc, T(0));
      }
      const tile::Mask above = tile_mask(d, tile::Mask::kDepthAbove, i0, kb, nc);
      const tile::Mask below = tile_mask(d, tile::Mask::kDepthBelow, i0, kb, nc);
      // dv += P^T dout
      tile::matmul_at_add(nc, nr, d.dv, s, kBc, dout + i0 * d.dv, d.dv, dv + kb * d.dv, d.dv, above);
      // dS = P * (dout v^T - Di) * scale (0 where P is)
      std::fill(dp, dp + nr * kBc, T(0));
      tile::matmul_add(nr, d.dv, nc, dout + i0 * d.dv, d.dv, w.vt.data(), kBc, dp, kBc,
                       tile_mask(d, tile::Mask::kColumns, i0, kb, nc));
      for (int64_t r = 0; r < nr; ++r) {
        T* row = s + r * kBc;
        const T* prow = dp + r * kBc;
        const T di = w.di[i0 + r];
#pragma omp simd
        for (int64_t c = 0; c < nc; ++c) row[c] = row[c] * (prow[c] - di) * scale;
      }
      // dq += dS k, dk += dS^T q
      tile::matmul_add(nr, nc, d.d, s, kBc, k + kb * d.d, d.d, dq + i0 * d.d, d.d, below);
      tile::matmul_at_add(nc, nr, d.d, s, kBc, q + i0 * d.d, d.d, dk + kb * d.d, d.d, above);
    }
  }
}

template <typename T>
void attention_backward_typed(const KernelContext& ctx, std::span<const TensorView> in,
                              std::span<const TensorView> out) {
  const AttentionDims d = dims_of(ctx, in[2], in[3], in[4]);
  const T *dout = in[0].ptr<T>(), *dlse = in[1].ptr<T>(), *q = in[2].ptr<T>(), *k = in[3].ptr<T>(), *v = in[4].ptr<T>(),
          *o = in[5].ptr<T>(), *lse = in[6].ptr<T>();
  T *dq = out[0].ptr<T>(), *dk = out[1].ptr<T>(), *dv = out[2].ptr<T>();
  const int64_t work = std::max<int64_t>(1, d.tq * d.tk * (d.d + d.dv));
  parallel_for(
      ctx.run.num_threads, d.batch,
      [&](int64_t b0, int64_t b1) {
        BackwardScratch<T> w(d);
        for (int64_t b = b0; b < b1; ++b)
          backward_row(d, dout + b * d.tq * d.dv, dlse + b * d.tq, q + b * d.tq * d.d, k + b * d.tk * d.d,
                       v + b * d.tk * d.dv, o + b * d.tq * d.dv, lse + b * d.tq, dq + b * d.tq * d.d,
                       dk + b * d.tk * d.d, dv + b * d.tk * d.dv, w);
      },
      std::max<int64_t>(1, (1 << 16) / work));
}

template <typename T>
void attention_backward_16bit(const KernelContext& ctx, std::span<const TensorView> in,
                              std::span<const TensorView> out) {
  const AttentionDims d = dims_of(ctx, in[2], in[3], in[4]);
  const T *dout = in[0].ptr<T>(), *q = in[2].ptr<T>(), *k = in[3].ptr<T>(), *v = in[4].ptr<T>(), *o = in[5].ptr<T>();
  const float *dlse = in[1].ptr<float>(), *lse = in[6].ptr<float>();
  T *dq = out[0].ptr<T>(), *dk = out[1].ptr<T>(), *dv = out[2].ptr<T>();
  const int64_t work = std::max<int64_t>(1, d.tq * d.tk * (d.d + d.dv));
  const int64_t nq = d.tq * d.d, nk = d.tk * d.d, nv = d.tk * d.dv, no = d.tq * d.dv;
  parallel_for(
      ctx.run.num_threads, d.batch,
      [&](int64_t b0, int64_t b1) {
        BackwardScratch<float> w(d);
        // Inputs dout, q, k, v, out and the results dq, dk, dv of one batch row in float32.
        std::vector<float> buf(static_cast<size_t>(2 * (nq + nk + nv) + 2 * no));
        float *gf = buf.data(), *qf = gf + no, *kf = qf + nq, *vf = kf + nk, *of = vf + nv;
        float *dqf = of + no, *dkf = dqf + nq, *dvf = dkf + nk;
        for (int64_t b = b0; b < b1; ++b) {
          widen_into(dout + b * no, gf, no);
          widen_into(q + b * nq, qf, nq);
          widen_into(k + b * nk, kf, nk);
          widen_into(v + b * nv, vf, nv);
          widen_into(o + b * no, of, no);
          backward_row(d, gf, dlse + b * d.tq, qf, kf, vf, of, lse + b * d.tq, dqf, dkf, dvf, w);
          narrow_into(dqf, dq + b * nq, nq);
          narrow_into(dkf, dk + b * nk, nk);
          narrow_into(dvf, dv + b * nv, nv);
        }
      },
      std::max<int64_t>(1, (1 << 16) / work));
}

void attention_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                               std::span<const TensorView> out) {
  if (out[0].size() == 0 && out[1].size() == 0 && out[2].size() == 0) return;
  if (in[2].dtype == DType::kBfloat16) return attention_backward_16bit<BFloat16>(ctx, in, out);
  if (in[2].dtype == DType::kFloat16) return attention_backward_16bit<Half>(ctx, in, out);
  dispatch_float(in[2].dtype, [&](auto tag) { attention_backward_typed<decltype(tag)>(ctx, in, out); });
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void register_cpu_attention_kernels() {
  register_kernel(OpId::kAttention, DeviceKind::kCPU, cpu::attention_kernel, HalfSupport::kAny);
  register_kernel(OpId::kAttentionBackward, DeviceKind::kCPU, cpu::attention_backward_kernel, HalfSupport::kAny);
}

}  // namespace kiln
