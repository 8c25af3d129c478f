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
// Backward: one task per batch row (its dq, dk, dv are then written by one
// thread, in a fixed order: results do not depend on the thread count). Key
// blocks outside, query blocks inside, skipping tiles the causal rule masks
// entirely; per tile P = exp(scale * S - lse) is recomputed from the saved
// lse, dv += P^T dout, dS = P * (dout v^T - Di) * scale with
// Di = rowsum(dout * out) - dlse, dq += dS k, dk += dS^T q.
//
// The tile products run tile::matmul_add (backends/cpu/attention_tile.h). In
// float32 and float64, accumulating in the data's dtype. float16/bfloat16
// are taken natively and computed in float32 (lse and dlse are float32
// already): each query block, key tile and value tile (and dout block in the
// backward) is converted into a per-thread float32 tile as it is loaded (the
// key tile straight into its transposed copy), dq accumulates in a float32
// row and dk, dv in float32 tiles, and every result is rounded once on store.
// The float32 code runs on those tiles in the same order, so the results are
// exactly those of the float32 kernel on the converted inputs, rounded once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
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

// fn(S{}) for the storage type S of t.
template <typename Fn>
void dispatch_float(DType t, Fn&& fn) {
  if (t == DType::kFloat32) return fn(float{});
  if (t == DType::kFloat64) return fn(double{});
  if (t == DType::kBfloat16) return fn(BFloat16{});
  if (t == DType::kFloat16) return fn(Half{});
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

// s[r][c] = q_r . k_c for a block of nr queries and nc keys (kt: the key
// tile transposed, [d][kBc], read only when nr > kDotRows). Forward and
// backward share it, so they compute the same scores.
template <typename T>
void scores(const AttentionDims& d, int64_t nr, int64_t nc, const T* q, const T* k, const T* kt, T* s) {
  if (nr <= kDotRows) return tile::dot_rows(nr, d.d, nc, q, d.d, k, d.d, s, kBc);
  std::fill(s, s + nr * kBc, T(0));
  tile::matmul_add(nr, d.d, nc, q, d.d, kt, kBc, s, kBc);
}

// ---- float16 / bfloat16 tiles

// dst[r][c] = src[r][c] in the compute type, for r < rows, c < cols.
template <typename S>
void convert_tile(int64_t rows, int64_t cols, const S* src, int64_t lds, compute_t<S>* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) {
    const S* x = src + r * lds;
    compute_t<S>* y = dst + r * ldd;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[c] = load(x[c]);
  }
}

// dst[r][c] = src[r][c] rounded to S, for r < rows, c < cols.
template <typename S>
void round_tile(int64_t rows, int64_t cols, const compute_t<S>* src, int64_t lds, S* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) {
    const compute_t<S>* x = src + r * lds;
    S* y = dst + r * ldd;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[c] = store<S>(x[c]);
  }
}

// dst[c][r] = src[r][c] in the compute type (tile::transpose for float
// types), for r < rows, c < cols.
template <typename S>
void transpose_tile(int64_t rows, int64_t cols, const S* src, int64_t lds, compute_t<S>* dst, int64_t ldd) {
  if constexpr (std::is_same_v<S, compute_t<S>>) {
    tile::transpose(rows, cols, src, lds, dst, ldd);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = load(src[r * lds + c]);
  }
}

// rows x cols of src (row stride lds) as the compute type: src itself when S
// is that type, else converted into buf (row stride lds).
template <typename S>
const compute_t<S>* tile_in(int64_t rows, int64_t cols, const S* src, int64_t lds, std::vector<compute_t<S>>& buf) {
  if constexpr (std::is_same_v<S, compute_t<S>>) {
    return src;
  } else {
    convert_tile(rows, cols, src, lds, buf.data(), lds);
    return buf.data();
  }
}

// ---- forward

// One key tile [kb, kb + nc) for queries [i0, i0 + nr): scores s, the
// running statistics m, l and the unnormalized output acc updated. qb: the
// query block, kp: the key tile's rows (dot-product scores) or kt: its
// transpose, vp: the value tile. Every dtype's arithmetic runs here, in T,
// out of line: float16/bfloat16 calls run the very code of float32 ones.
template <typename T>
[[gnu::noinline]] void forward_tile(const AttentionDims& d, int64_t i0, int64_t nr, int64_t kb, int64_t nc, const T* qb,
                                    const T* kp, const T* kt, const T* vp, T* s, T* acc, T* m, T* l) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const T scale = static_cast<T>(d.scale);
  scores(d, nr, nc, qb, kp, kt, s);
  for (int64_t r = 0; r < nr; ++r) {
    T* row = s + r * kBc;
    const int64_t nv = visible(d, i0 + r, kb, nc);
    if (nv == 0) {
      std::fill(row, row + nc, T(0));
      continue;
    }
    T mx = kNegInf;
    for (int64_t c = 0; c < nv; ++c) mx = std::max(mx, row[c] * scale);
    const T m_new = std::max(m[r], mx);
    const T alpha = std::exp(m[r] - m_new);  // 0 on the first visible tile
    exp_shifted(row, scale, m_new, row, nv);
    std::fill(row + nv, row + nc, T(0));
    l[r] = l[r] * alpha + sum_of(row, nv);
    m[r] = m_new;
    if (alpha != T(1)) {
      T* a = acc + r * d.dv;
#pragma omp simd
      for (int64_t e = 0; e < d.dv; ++e) a[e] *= alpha;
    }
  }
  tile::matmul_add(nr, nc, d.dv, s, kBc, vp, d.dv, acc, d.dv);
}

// Per thread. The 16-bit tiles (qf: the query block, kf: the key tile for
// dot-product scores, vf: the value tile) are empty for float types.
template <typename S>
struct ForwardScratch {
  using T = compute_t<S>;
  static constexpr bool kHalf = !std::is_same_v<S, T>;
  std::vector<T> kt, s, acc, m, l, qf, kf, vf;
  explicit ForwardScratch(const AttentionDims& d)
      : kt(static_cast<size_t>(d.d * kBc)),
        s(static_cast<size_t>(kBr * kBc)),
        acc(static_cast<size_t>(kBr * d.dv)),
        m(kBr),
        l(kBr),
        qf(kHalf ? static_cast<size_t>(kBr * d.d) : 0),
        kf(kHalf ? static_cast<size_t>(kBc * d.d) : 0),
        vf(kHalf ? static_cast<size_t>(kBc * d.dv) : 0) {}
};

// Rows [i0, i0 + nr) of one batch row: q [tq, d], k [tk, d], v [tk, dv] -> o [tq, dv], lse [tq].
template <typename S>
void forward_block(const AttentionDims& d, const S* q, const S* k, const S* v, S* o, compute_t<S>* lse, int64_t i0,
                   int64_t nr, ForwardScratch<S>& w) {
  using T = compute_t<S>;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  std::fill(w.acc.begin(), w.acc.begin() + nr * d.dv, T(0));
  std::fill(w.m.begin(), w.m.end(), kNegInf);
  std::fill(w.l.begin(), w.l.end(), T(0));
  const T* qb = tile_in(nr, d.d, q + i0 * d.d, d.d, w.qf);
  const int64_t kend = d.allowed(i0 + nr - 1);
  for (int64_t kb = 0; kb < kend; kb += kBc) {
    const int64_t nc = std::min(kBc, kend - kb);
    const T* kp = nullptr;  // the key tile's rows, read by dot-product scores only
    if (nr > kDotRows)
      transpose_tile(nc, d.d, k + kb * d.d, d.d, w.kt.data(), kBc);
    else
      kp = tile_in(nc, d.d, k + kb * d.d, d.d, w.kf);
    const T* vp = tile_in(nc, d.dv, v + kb * d.dv, d.dv, w.vf);
    forward_tile(d, i0, nr, kb, nc, qb, kp, w.kt.data(), vp, w.s.data(), w.acc.data(), w.m.data(), w.l.data());
  }
  for (int64_t r = 0; r < nr; ++r) {
    const T l = w.l[r];
    const T inv = l > 0 ? T(1) / l : T(0);
    const T* a = w.acc.data() + r * d.dv;
    S* out = o + (i0 + r) * d.dv;
#pragma omp simd
    for (int64_t e = 0; e < d.dv; ++e) out[e] = store<S>(a[e] * inv);
    lse[i0 + r] = l > 0 ? w.m[r] + std::log(l) : kNegInf;
  }
}

// S: the storage type of q, k, v and out; lse (and the arithmetic) is
// compute_t<S>, float32 for 16-bit inputs.
template <typename S>
void attention_typed(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  using T = compute_t<S>;
  const AttentionDims d = dims_of(ctx, in[0], in[1], in[2]);
  const S *q = in[0].ptr<S>(), *k = in[1].ptr<S>(), *v = in[2].ptr<S>();
  S* o = out[0].ptr<S>();
  T* lse = out[1].ptr<T>();
  const int64_t blocks = (d.tq + kBr - 1) / kBr;
  // A task is worth a thread when its tiles hold a few thousand products.
  const int64_t work = std::max<int64_t>(1, std::min(d.tq, kBr) * d.tk * (d.d + d.dv));
  parallel_for(
      ctx.run.num_threads, d.batch * blocks,
      [&](int64_t t0, int64_t t1) {
        ForwardScratch<S> w(d);
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t b = t / blocks, i0 = (t % blocks) * kBr;
          forward_block(d, q + b * d.tq * d.d, k + b * d.tk * d.d, v + b * d.tk * d.dv, o + b * d.tq * d.dv,
                        lse + b * d.tq, i0, std::min(kBr, d.tq - i0), w);
        }
      },
      std::max<int64_t>(1, (1 << 16) / work));
}

void attention_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (out[0].size() == 0 && out[1].size() == 0) return;
  dispatch_float(in[0].dtype, [&](auto tag) { attention_typed<decltype(tag)>(ctx, in, out); });
}

// ---- backward

// Per thread. For 16-bit S: the query and dout blocks (qf, gf), the key tile
// (kf), dk and dv of the key tile (dkt, dvt), dq of the batch row (dqf) and
// one row of dout and out (grow, orow), all in float32; empty for float
// types, whose arrays are read and accumulated in place.
template <typename S>
struct BackwardScratch {
  using T = compute_t<S>;
  static constexpr bool kHalf = !std::is_same_v<S, T>;
  std::vector<T> kt, vt, s, dp, di, qf, gf, kf, dkt, dvt, dqf, grow, orow;
  explicit BackwardScratch(const AttentionDims& d)
      : kt(static_cast<size_t>(d.d * kBc)),
        vt(static_cast<size_t>(d.dv * kBc)),
        s(static_cast<size_t>(kBr * kBc)),
        dp(static_cast<size_t>(kBr * kBc)),
        di(static_cast<size_t>(d.tq)),
        qf(kHalf ? static_cast<size_t>(kBr * d.d) : 0),
        gf(kHalf ? static_cast<size_t>(kBr * d.dv) : 0),
        kf(kHalf ? static_cast<size_t>(kBc * d.d) : 0),
        dkt(kHalf ? static_cast<size_t>(kBc * d.d) : 0),
        dvt(kHalf ? static_cast<size_t>(kBc * d.dv) : 0),
        dqf(kHalf ? static_cast<size_t>(d.tq * d.d) : 0),
        grow(kHalf ? static_cast<size_t>(d.dv) : 0),
        orow(kHalf ? static_cast<size_t>(d.dv) : 0) {}
};

// Key tile [kb, kb + nc) against queries [i0, i0 + nr): dv_acc += P^T dout,
// dq_acc (dq of the batch row) += dS k, dk_acc += dS^T q, dk_acc and dv_acc
// being the key tile's rows. qb, gb: the query and dout blocks; kp: the key
// tile's rows, kt and vt: the key and value tiles transposed. As
// forward_tile, out of line so that every dtype runs this code.
template <typename T>
[[gnu::noinline]] void backward_tile(const AttentionDims& d, int64_t i0, int64_t nr, int64_t kb, int64_t nc,
                                     const T* qb, const T* gb, const T* kp, const T* kt, const T* vt, const T* lse,
                                     const T* di, T* s, T* dp, T* dq_acc, T* dk_acc, T* dv_acc) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const T scale = static_cast<T>(d.scale);
  scores(d, nr, nc, qb, kp, kt, s);
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
  // dv += P^T dout
  tile::matmul_at_add(nc, nr, d.dv, s, kBc, gb, d.dv, dv_acc, d.dv);
  // dS = P * (dout v^T - Di) * scale
  std::fill(dp, dp + nr * kBc, T(0));
  tile::matmul_add(nr, d.dv, nc, gb, d.dv, vt, kBc, dp, kBc);
  for (int64_t r = 0; r < nr; ++r) {
    T* row = s + r * kBc;
    const T* prow = dp + r * kBc;
    const T dr = di[i0 + r];
#pragma omp simd
    for (int64_t c = 0; c < nc; ++c) row[c] = row[c] * (prow[c] - dr) * scale;
  }
  // dq += dS k, dk += dS^T q
  tile::matmul_add(nr, nc, d.d, s, kBc, kp, d.d, dq_acc + i0 * d.d, d.d);
  tile::matmul_at_add(nc, nr, d.d, s, kBc, qb, d.d, dk_acc, d.d);
}

// The dot product of x and y (n elements), out of line as forward_tile.
template <typename T>
[[gnu::noinline]] T dot(const T* x, const T* y, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t e = 0; e < n; ++e) s += x[e] * y[e];
  return s;
}

// One batch row: dq [tq, d], dk [tk, d], dv [tk, dv] from dout, dlse, q, k, v, out, lse.
template <typename S>
void backward_row(const AttentionDims& d, const S* dout, const compute_t<S>* dlse, const S* q, const S* k, const S* v,
                  const S* o, const compute_t<S>* lse, S* dq, S* dk, S* dv, BackwardScratch<S>& w) {
  using T = compute_t<S>;
  constexpr bool kHalf = BackwardScratch<S>::kHalf;
  // Where dq, dk and dv accumulate: the outputs themselves, or float32 buffers.
  T *dq_acc, *dk_acc, *dv_acc;
  if constexpr (kHalf) {
    dq_acc = w.dqf.data();
    std::fill(w.dqf.begin(), w.dqf.end(), T(0));
  } else {
    dq_acc = dq;
    std::fill(dq, dq + d.tq * d.d, T(0));
    std::fill(dk, dk + d.tk * d.d, T(0));
    std::fill(dv, dv + d.tk * d.dv, T(0));
  }
  for (int64_t i = 0; i < d.tq; ++i) {
    const T* g = tile_in(1, d.dv, dout + i * d.dv, d.dv, w.grow);
    const T* y = tile_in(1, d.dv, o + i * d.dv, d.dv, w.orow);
    w.di[i] = dot(g, y, d.dv) - dlse[i];
  }
  for (int64_t kb = 0; kb < d.tk; kb += kBc) {
    const int64_t nc = std::min(kBc, d.tk - kb);
    transpose_tile(nc, d.d, k + kb * d.d, d.d, w.kt.data(), kBc);
    transpose_tile(nc, d.dv, v + kb * d.dv, d.dv, w.vt.data(), kBc);
    const T* kp = tile_in(nc, d.d, k + kb * d.d, d.d, w.kf);
    if constexpr (kHalf) {
      dk_acc = w.dkt.data();
      dv_acc = w.dvt.data();
      std::fill(w.dkt.begin(), w.dkt.end(), T(0));
      std::fill(w.dvt.begin(), w.dvt.end(), T(0));
    } else {
      dk_acc = dk + kb * d.d;
      dv_acc = dv + kb * d.dv;
    }
    for (int64_t i0 = 0; i0 < d.tq; i0 += kBr) {
      const int64_t nr = std::min(kBr, d.tq - i0);
      if (visible(d, i0 + nr - 1, kb, nc) == 0) continue;  // every row of the block is masked here
      const T* qb = tile_in(nr, d.d, q + i0 * d.d, d.d, w.qf);
      const T* gb = tile_in(nr, d.dv, dout + i0 * d.dv, d.dv, w.gf);
      backward_tile(d, i0, nr, kb, nc, qb, gb, kp, w.kt.data(), w.vt.data(), lse, w.di.data(), w.s.data(), w.dp.data(),
                    dq_acc, dk_acc, dv_acc);
    }
    if constexpr (kHalf) {
      round_tile(nc, d.d, w.dkt.data(), d.d, dk + kb * d.d, d.d);
      round_tile(nc, d.dv, w.dvt.data(), d.dv, dv + kb * d.dv, d.dv);
    }
  }
  if constexpr (kHalf) round_tile(d.tq, d.d, w.dqf.data(), d.d, dq, d.d);
}

// S: the storage type of dout, q, k, v, out and the gradients; dlse and lse
// are compute_t<S>.
template <typename S>
void attention_backward_typed(const KernelContext& ctx, std::span<const TensorView> in,
                              std::span<const TensorView> out) {
  using T = compute_t<S>;
  const AttentionDims d = dims_of(ctx, in[2], in[3], in[4]);
  const S *dout = in[0].ptr<S>(), *q = in[2].ptr<S>(), *k = in[3].ptr<S>(), *v = in[4].ptr<S>(), *o = in[5].ptr<S>();
  const T *dlse = in[1].ptr<T>(), *lse = in[6].ptr<T>();
  S *dq = out[0].ptr<S>(), *dk = out[1].ptr<S>(), *dv = out[2].ptr<S>();
  const int64_t work = std::max<int64_t>(1, d.tq * d.tk * (d.d + d.dv));
  parallel_for(
      ctx.run.num_threads, d.batch,
      [&](int64_t b0, int64_t b1) {
        BackwardScratch<S> w(d);
        for (int64_t b = b0; b < b1; ++b)
          backward_row(d, dout + b * d.tq * d.dv, dlse + b * d.tq, q + b * d.tq * d.d, k + b * d.tk * d.d,
                       v + b * d.tk * d.dv, o + b * d.tq * d.dv, lse + b * d.tq, dq + b * d.tq * d.d,
                       dk + b * d.tk * d.d, dv + b * d.tk * d.dv, w);
      },
      std::max<int64_t>(1, (1 << 16) / work));
}

void attention_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                               std::span<const TensorView> out) {
  if (out[0].size() == 0 && out[1].size() == 0 && out[2].size() == 0) return;
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
