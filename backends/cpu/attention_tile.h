// Internal to the CPU attention kernels (backends/cpu/attention.cc): the
// small dense products on one tile, register-blocked.
//
//   cpu::tile::matmul_add(m, k, n, a, lda, b, ldb, c, ldc);   // c[m, n] += a[m, k] . b[k, n]
//   cpu::tile::matmul_at_add(m, k, n, a, lda, b, ldb, c, ldc); // c[m, n] += a[k, m]^T . b[k, n]
//   cpu::tile::dot_rows(m, k, n, a, lda, b, ldb, c, ldc);     // c[m, n] = a[m, k] . b[n, k]^T
//
// The two products take a tile::Mask last: on a causal diagonal tile they
// skip the blocks whose products the mask zeroes (see Mask).
//
// All operands are row-major with the given row strides, float32 or
// float64, and must not overlap. Tiles are at most a few hundred rows and
// columns: the blocking keeps a block of c in registers over the whole k
// loop and streams rows of b, which then come from L1; the last n % lanes
// columns go through zero-padded copies. The block fits the vector
// registers the build targets: with AVX-512 (32 registers of 64 bytes) 4
// rows x 4 vectors, otherwise (AVX2: 16 registers of 32 bytes) 6 rows x 2
// vectors; 64-byte blocks on AVX2 spilled every accumulator and ran the
// kernels 7x slower than the unfused decomposition. Each output adds its k
// products in order of p, so results do not depend on the blocking.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kiln::cpu::tile {

#if defined(__AVX512F__)
inline constexpr int kVectorBytes = 64, kBlockRows = 4, kBlockVectors = 4;
#else
inline constexpr int kVectorBytes = 32, kBlockRows = 6, kBlockVectors = 2;
#endif

template <typename T>
struct Vec {
  typedef T type __attribute__((vector_size(kVectorBytes)));
  static constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(T));
};

// c[R rows][NV vectors] += a[R rows][k] . b[k][NV vectors]; with TA, a is
// stored transposed (a[p][r] at a + p * lda + r).
template <typename T, int R, int NV, bool TA>
inline void micro(int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc) {
  using V = typename Vec<T>::type;
  constexpr int L = Vec<T>::kLanes;
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) std::memcpy(&acc[r][v], c + r * ldc + v * L, sizeof(V));
  for (int64_t p = 0; p < k; ++p) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + p * ldb + v * L, sizeof(V));
    for (int r = 0; r < R; ++r) {
      const T x = TA ? a[p * lda + r] : a[r * lda + p];
      for (int v = 0; v < NV; ++v) acc[r][v] += x * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) std::memcpy(c + r * ldc + v * L, &acc[r][v], sizeof(V));
}

// The last `rows` < kBlockRows rows of a product in one block of that many
// (a tile of 64 rows leaves 4 on AVX2), rather than one row at a time.
template <typename T, int NV, bool TA, int R = kBlockRows - 1>
inline void last_rows(int64_t rows, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc) {
  if constexpr (R >= 1) {
    if (rows == R) return micro<T, R, NV, TA>(k, a, lda, b, ldb, c, ldc);
    last_rows<T, NV, TA, R - 1>(rows, k, a, lda, b, ldb, c, ldc);
  }
}

// The products a causal mask makes unneeded, on attention's diagonal tiles.
// In the score tile's coordinates (query rows r, key columns c), entry
// (r, c) is visible iff c < r + diag.
//   kColumns:    c[r][j] is needed only for j < r + diag (the scores, dout v^T);
//   kDepthBelow: a[r][p] is zero for p >= r + diag (P v, dS k);
//   kDepthAbove: a is stored transposed and a[p][r] is zero for r >= p + diag,
//                so row r needs only p > r - diag (P^T dout, dS^T q).
// Whole blocks of kBlockRows rows and NV vectors are skipped: with
// kColumns some outputs past the diagonal are still computed (the caller
// masks them); with kDepth* every skipped product is of an exact zero, so
// each output still adds the rest in order of p.
struct Mask {
  enum Kind { kNone, kColumns, kDepthBelow, kDepthAbove } kind = kNone;
  int64_t diag = 0;
};

// Columns [j, j + NV * lanes) of every row.
template <typename T, int NV, bool TA>
inline void column_block(int64_t m, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc,
                         Mask mask, int64_t j) {
  constexpr int R = kBlockRows;
  // Row i of the product starts at a + i * lda, or at a + i when a is
  // transposed; depth p at a + p, or at a + p * lda.
  const int64_t row_step = TA ? 1 : lda, depth_step = TA ? lda : 1;
  for (int64_t i = 0; i < m; i += R) {
    const int64_t rows = std::min<int64_t>(R, m - i);
    int64_t p0 = 0, p1 = k;
    if (mask.kind == Mask::kColumns && j >= i + rows - 1 + mask.diag) continue;
    if (mask.kind == Mask::kDepthBelow) p1 = std::clamp<int64_t>(i + rows - 1 + mask.diag, 0, k);
    if (mask.kind == Mask::kDepthAbove) p0 = std::clamp<int64_t>(i - mask.diag + 1, 0, k);
    if (p1 <= p0) continue;
    const T* ap = a + i * row_step + p0 * depth_step;
    if (rows == R) {
      micro<T, R, NV, TA>(p1 - p0, ap, lda, b + p0 * ldb, ldb, c + i * ldc, ldc);
    } else {
      last_rows<T, NV, TA>(rows, p1 - p0, ap, lda, b + p0 * ldb, ldb, c + i * ldc, ldc);
    }
  }
}

template <typename T, bool TA>
void product_add(int64_t m, int64_t k, int64_t n, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                 int64_t ldc, Mask mask) {
  constexpr int L = Vec<T>::kLanes;
  constexpr int NV = kBlockVectors;
  int64_t j = 0;
  for (; j + NV * L <= n; j += NV * L) column_block<T, NV, TA>(m, k, a, lda, b + j, ldb, c + j, ldc, mask, j);
  for (; j + L <= n; j += L) column_block<T, 1, TA>(m, k, a, lda, b + j, ldb, c + j, ldc, mask, j);
  if (j == n) return;
  // The last n % lanes columns: through zero-padded copies of b's and c's
  // columns, so that they run on the vector path too.
  const int64_t tail = n - j;
  thread_local std::vector<T> pad;
  pad.assign(static_cast<size_t>((k + m) * L), T(0));
  T *bp = pad.data(), *cp = pad.data() + k * L;
  for (int64_t p = 0; p < k; ++p) std::memcpy(bp + p * L, b + p * ldb + j, tail * sizeof(T));
  for (int64_t i = 0; i < m; ++i) std::memcpy(cp + i * L, c + i * ldc + j, tail * sizeof(T));
  column_block<T, 1, TA>(m, k, a, lda, bp, L, cp, L, mask, j);
  for (int64_t i = 0; i < m; ++i) std::memcpy(c + i * ldc + j, cp + i * L, tail * sizeof(T));
}

template <typename T>
void matmul_add(int64_t m, int64_t k, int64_t n, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc,
                Mask mask = {}) {
  product_add<T, false>(m, k, n, a, lda, b, ldb, c, ldc, mask);
}

// a is [k, m] (row stride lda): c += a^T . b without forming a^T.
template <typename T>
void matmul_at_add(int64_t m, int64_t k, int64_t n, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                   int64_t ldc, Mask mask = {}) {
  product_add<T, true>(m, k, n, a, lda, b, ldb, c, ldc, mask);
}

// c[i][j] = a_i . b_j for i < m, j < n (b's rows as given, not transposed):
// for a few rows of a, where transposing b would cost more than the products.
template <typename T>
void dot_rows(int64_t m, int64_t k, int64_t n, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const T *x = a + i * lda, *y = b + j * ldb;
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t p = 0; p < k; ++p) s += x[p] * y[p];
      c[i * ldc + j] = s;
    }
}

// dst[c][r] = src[r][c] for r < rows, c < cols.
template <typename T>
void transpose(int64_t rows, int64_t cols, const T* src, int64_t lds, T* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

}  // namespace kiln::cpu::tile
