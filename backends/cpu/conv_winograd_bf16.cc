// bfloat16 Winograd F(2x2, 3x3): see conv_winograd_bf16.h.
//
// Layouts (bf16 unless noted; T = tiles in a block, C / K = input / output
// channels, tile p = (image, tile row, tile column) over the whole batch):
//   U [K/64][16][C/2][64][2]  transformed weights G g Gᵀ, for each block of 64
//                             output channels and transform position: input
//                             channel pairs, 64 channels, the pair -- the
//                             operand order of vdpbf16ps
//   V [16][T][C]              transformed input tiles Bᵀ d B of one block
//   Z [16][T][64] float32     V . U for one block of 64 output channels
// and the output tile is Aᵀ Z A. The weight gradient uses V over a chunk of
// images, dZ [16][tiles][K] = A dy Aᵀ (bf16) and dU [16][C][K] float32 =
// Σ Vᵀ dZ, and dw = Gᵀ dU G. Every function that uses AVX-512 carries
// the target attribute below and is reached only after winograd_bf16_cpu().
#include "backends/cpu/conv_winograd_bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/onednn_util.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/thread_buffer.h"
#include "backends/cpu/weight_cache.h"
#include "backends/cpu/winograd_common.h"
#include "ir/error.h"

// GCC 12 reports the "undefined" pass-through operands inside its AVX-512
// intrinsics (_mm512_undefined_*) as maybe uninitialized: not this code's.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define KILN_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

namespace kiln::cpu {
namespace {

constexpr int kPositions = 16;  // (2 + 2)² transform positions
constexpr int kBlockK = 64;     // output channels per product: four vectors of 16 float32 sums
constexpr int kRows = 6;        // tiles per register block: 6 x 4 sums + 4 weight vectors of 32 registers
// Bytes of a block's V: with Z and a slice of U it stays in a 1-2 MiB L2.
constexpr int64_t kBlockBytes = int64_t{192} << 10;
constexpr int64_t kMaxBlockTiles = 96;
constexpr double kMinSaving = 1.5;  // as conv_winograd.cc's: below it the transforms cost more than they save
// Bytes of V and dZ per chunk of images in the weight gradient (whose
// products run as one oneDNN matmul per chunk, summing over its tiles).
constexpr int64_t kChunkBytes = int64_t{12} << 20;

// ---- 16 channels as one vector of float32

KILN_BF16_TARGET inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

KILN_BF16_TARGET inline void store16(uint16_t* p, __m512 v) {
  // vcvtneps2bf16: round to nearest even, NaN stays NaN.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
}

// ---- the weight transform (once per weight change in inference, per call
// in training)

// Where tap (i, j) of the kernel from input channel c to output channel k
// lies in the weight array: base + k sk + c sc + i si + j sj elements.
struct WeightWalk {
  int64_t base = 0, sk = 0, sc = 0, si = 0, sj = 0;
};

// The forward weights [Kf][3][3][Cf] (channel-last) or [Kf][Cf][3][3], read
// as the problem's kernel: as they are, or (transposed_weight) with input
// and output channels swapped and the taps rotated by 180 degrees.
WeightWalk weight_walk(const WinogradConv& s, bool channels_last) {
  // The forward convolution's input channels.
  const int64_t Cf = s.transposed_weight ? s.out_channels : s.in_channels;
  // Strides of the forward array's output channel, input channel, row, column.
  const int64_t fk = 9 * Cf, fc = channels_last ? 1 : 9;
  const int64_t fi = channels_last ? 3 * Cf : 3, fj = channels_last ? Cf : 1;
  if (!s.transposed_weight) return {0, fk, fc, fi, fj};
  return {2 * fi + 2 * fj, fc, fk, -fi, -fj};
}

inline float widen(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

// G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]: three taps -> four positions,
// on 16 output channels at once.
KILN_BF16_TARGET inline void weight_1d(__m512 g0, __m512 g1, __m512 g2, __m512 u[4]) {
  const __m512 half = _mm512_set1_ps(0.5f), outer = _mm512_add_ps(g0, g2);
  u[0] = g0;
  u[1] = _mm512_mul_ps(half, _mm512_add_ps(outer, g1));
  u[2] = _mm512_mul_ps(half, _mm512_sub_ps(outer, g1));
  u[3] = g2;
}

// U (layout above) from the weights, for input channels [c0, c1) (even
// bounds). Per channel pair, the 2 x 9 taps of every output channel are first
// gathered into float32 rows (the arrays' strides differ by layout), then
// transformed 16 output channels at a time and stored as interleaved pairs.
KILN_BF16_TARGET void transform_weights(const WinogradConv& s, const WeightWalk& walk, const uint16_t* w,
                                        int64_t c0, int64_t c1, uint16_t* u) {
  const int64_t K = s.out_channels, pairs = s.in_channels / 2;
  float* taps = thread_buffer<float, 3>(static_cast<size_t>(2 * 9 * K));  // [2][9][K]
  for (int64_t c = c0; c < c1; c += 2) {
    for (int e = 0; e < 2; ++e)
      for (int t = 0; t < 9; ++t) {
        const uint16_t* src = w + walk.base + (c + e) * walk.sc + (t / 3) * walk.si + (t % 3) * walk.sj;
        float* row = taps + (e * 9 + t) * K;
        for (int64_t k = 0; k < K; ++k) row[k] = widen(src[k * walk.sk]);
      }
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
      __m256i half[2][kPositions];  // the 16 positions of channels c and c + 1, in bf16
      for (int e = 0; e < 2; ++e) {
        __m512 g[9];
        for (int t = 0; t < 9; ++t) g[t] = _mm512_loadu_ps(taps + (e * 9 + t) * K + k0);
        __m512 rows[4][3], v[4];
        for (int j = 0; j < 3; ++j) {  // G g: the three columns
          weight_1d(g[j], g[3 + j], g[6 + j], v);
          for (int i = 0; i < 4; ++i) rows[i][j] = v[i];
        }
        for (int i = 0; i < 4; ++i) {  // (G g) Gᵀ: each row
          weight_1d(rows[i][0], rows[i][1], rows[i][2], v);
          for (int j = 0; j < 4; ++j) half[e][i * 4 + j] = (__m256i)_mm512_cvtneps_pbh(v[j]);
        }
      }
      const int64_t kb = k0 / kBlockK, kk = k0 % kBlockK;
      for (int xi = 0; xi < kPositions; ++xi) {
        // (k, pair) interleaved: unpack within 128-bit lanes, then put the lanes in order.
        const __m256i lo = _mm256_unpacklo_epi16(half[0][xi], half[1][xi]);
        const __m256i hi = _mm256_unpackhi_epi16(half[0][xi], half[1][xi]);
        uint16_t* dst = u + (((kb * kPositions + xi) * pairs + c / 2) * kBlockK + kk) * 2;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
      }
    }
  }
}

// ---- the input transform: Bᵀ d B, Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]

KILN_BF16_TARGET inline void input_1d(__m512 d0, __m512 d1, __m512 d2, __m512 d3, __m512 out[4]) {
  out[0] = _mm512_sub_ps(d0, d2);
  out[1] = _mm512_add_ps(d1, d2);
  out[2] = _mm512_sub_ps(d2, d1);
  out[3] = _mm512_sub_ps(d1, d3);
}

// Geometry of the tiles over the whole batch.
struct Tiles {
  int64_t tiles_h, tiles_w, per_image, total;
  explicit Tiles(const WinogradConv& s)
      : tiles_h((s.out_height + 1) / 2),
        tiles_w((s.out_width + 1) / 2),
        per_image(tiles_h * tiles_w),
        total(s.batch * tiles_h * tiles_w) {}

  // Tile p's R x R window of a channel-last [images][rows][cols][channels]
  // array, from row 2 ty - top and column 2 tx - left: each pixel's first
  // channel, null outside the array (zero padding).
  template <int R>
  void window(int64_t p, const uint16_t* a, int64_t rows, int64_t cols, int64_t channels, int64_t top,
              int64_t left, const uint16_t* (&out)[R][R]) const {
    const int64_t n = p / per_image, ty = p % per_image / tiles_w, tx = p % tiles_w;
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < R; ++j) {
        const int64_t y = ty * 2 - top + i, x = tx * 2 - left + j;
        out[i][j] = y >= 0 && y < rows && x >= 0 && x < cols ? a + ((n * rows + y) * cols + x) * channels : nullptr;
      }
  }
};

// V [16][T][C] for tiles [p0, p0 + count), positions `plane` elements apart.
KILN_BF16_TARGET void transform_input(const WinogradConv& s, const Tiles& g, const uint16_t* x, int64_t p0,
                                      int64_t count, int64_t plane, uint16_t* v) {
  const int64_t C = s.in_channels, H = s.height, W = s.width;
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t t = 0; t < count; ++t) {
    const uint16_t* pixel[4][4];
    g.window<4>(p0 + t, x, H, W, C, s.pad_top, s.pad_left, pixel);
    for (int64_t c = 0; c < C; c += 16) {
      __m512 r[4][4];  // Bᵀ d: r[i][j]
      for (int j = 0; j < 4; ++j) {
        __m512 d[4];
        for (int i = 0; i < 4; ++i) d[i] = pixel[i][j] ? load16(pixel[i][j] + c) : zero;
        __m512 col[4];
        input_1d(d[0], d[1], d[2], d[3], col);
        for (int i = 0; i < 4; ++i) r[i][j] = col[i];
      }
      for (int i = 0; i < 4; ++i) {
        __m512 out[4];
        input_1d(r[i][0], r[i][1], r[i][2], r[i][3], out);
        for (int j = 0; j < 4; ++j) store16(v + (i * 4 + j) * plane + t * C + c, out[j]);
      }
    }
  }
}

// ---- the products: Z[xi][t][0..64) = Σ over c of V[xi][t][c] U[xi][c][0..64)

// R tiles (rows of V `ldv` apart) x 64 output channels; `pairs` input channel
// pairs; z rows 64 floats apart.
template <int R>
KILN_BF16_TARGET void product_rows(const uint16_t* v, int64_t ldv, const uint16_t* u, int64_t pairs, float* z) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_setzero_ps();
  for (int64_t j = 0; j < pairs; ++j) {
    const uint16_t* uj = u + j * 2 * kBlockK;
    __m512bh b[4];
    for (int q = 0; q < 4; ++q) b[q] = (__m512bh)_mm512_loadu_si512(uj + q * 32);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, v + r * ldv + 2 * j, sizeof pair);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
      for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_dpbf16_ps(acc[r][q], a, b[q]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) _mm512_storeu_ps(z + r * kBlockK + q * 16, acc[r][q]);
}

KILN_BF16_TARGET void product(const uint16_t* v, int64_t ldv, const uint16_t* u, int64_t pairs, int64_t rows,
                              float* z) {
  int64_t t = 0;
  for (; t + kRows <= rows; t += kRows) product_rows<kRows>(v + t * ldv, ldv, u, pairs, z + t * kBlockK);
  switch (rows - t) {
    case 0: break;
    case 1: product_rows<1>(v + t * ldv, ldv, u, pairs, z + t * kBlockK); break;
    case 2: product_rows<2>(v + t * ldv, ldv, u, pairs, z + t * kBlockK); break;
    case 3: product_rows<3>(v + t * ldv, ldv, u, pairs, z + t * kBlockK); break;
    case 4: product_rows<4>(v + t * ldv, ldv, u, pairs, z + t * kBlockK); break;
    case 5: product_rows<5>(v + t * ldv, ldv, u, pairs, z + t * kBlockK); break;
    default: KILN_ASSERT(!"more rows than a register block");
  }
}

// ---- the output transform: Aᵀ z A, Aᵀ = [1 1 1 0; 0 1 -1 -1]

KILN_BF16_TARGET inline void output_1d(__m512 z0, __m512 z1, __m512 z2, __m512 z3, __m512& y0, __m512& y1) {
  const __m512 a = _mm512_sub_ps(z1, z2);
  y0 = _mm512_add_ps(_mm512_add_ps(z0, z1), z2);
  y1 = _mm512_sub_ps(a, z3);
}

struct Epilogue {
  const uint16_t* bias;  // [K] or null
  const uint16_t* sum;   // shaped like y, or null (may be y)
  bool relu;
};

// y for tiles [p0, p0 + count) and output channels [k0, k0 + 64) from
// Z [16][T][64] (positions `plane` floats apart).
KILN_BF16_TARGET void transform_output(const WinogradConv& s, const Tiles& g, const float* z, int64_t p0,
                                       int64_t count, int64_t plane, int64_t k0, const Epilogue& e, uint16_t* y) {
  const int64_t K = s.out_channels, OH = s.out_height, OW = s.out_width;
  __m512 bias[4];
  for (int q = 0; q < 4; ++q) bias[q] = e.bias ? load16(e.bias + k0 + q * 16) : _mm512_setzero_ps();
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t t = 0; t < count; ++t) {
    const int64_t p = p0 + t, n = p / g.per_image, ty = p % g.per_image / g.tiles_w, tx = p % g.tiles_w;
    const bool full_rows = ty * 2 + 1 < OH, full_cols = tx * 2 + 1 < OW;
    for (int q = 0; q < 4; ++q) {
      __m512 r[2][4];  // Aᵀ z
      for (int j = 0; j < 4; ++j) {
        __m512 zc[4];
        for (int i = 0; i < 4; ++i) zc[i] = _mm512_loadu_ps(z + (i * 4 + j) * plane + t * kBlockK + q * 16);
        output_1d(zc[0], zc[1], zc[2], zc[3], r[0][j], r[1][j]);
      }
      for (int i = 0; i < 2; ++i) {
        if (i == 1 && !full_rows) break;
        __m512 out[2];
        output_1d(r[i][0], r[i][1], r[i][2], r[i][3], out[0], out[1]);
        for (int j = 0; j < 2; ++j) {
          if (j == 1 && !full_cols) break;
          const int64_t at = ((n * OH + ty * 2 + i) * OW + tx * 2 + j) * K + k0 + q * 16;
          __m512 val = _mm512_add_ps(out[j], bias[q]);
          if (e.sum) val = _mm512_add_ps(val, load16(e.sum + at));
          if (e.relu) val = _mm512_max_ps(val, zero);
          store16(y + at, val);
        }
      }
    }
  }
}

// ---- the weight gradient's transforms

// A = (Aᵀ)ᵀ: a 2-output gradient into the 4 transform positions.
KILN_BF16_TARGET inline void output_grad_1d(__m512 y0, __m512 y1, __m512 z[4]) {
  z[0] = y0;
  z[1] = _mm512_add_ps(y0, y1);
  z[2] = _mm512_sub_ps(y0, y1);
  z[3] = _mm512_sub_ps(_mm512_setzero_ps(), y1);
}

// dZ [16][T][K] (positions `plane` elements apart) = A dy Aᵀ for tiles
// [p0, p0 + count) of the channel-last output gradient dy; outputs beyond the
// image (the padding up to whole tiles) have no gradient.
KILN_BF16_TARGET void transform_output_grad(const WinogradConv& s, const Tiles& g, const uint16_t* dy, int64_t p0,
                                            int64_t count, int64_t plane, uint16_t* z) {
  const int64_t K = s.out_channels, OH = s.out_height, OW = s.out_width;
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t t = 0; t < count; ++t) {
    const uint16_t* pixel[2][2];
    g.window<2>(p0 + t, dy, OH, OW, K, 0, 0, pixel);
    for (int64_t k = 0; k < K; k += 16) {
      __m512 r[4][2];  // A dy: r[i][j]
      for (int j = 0; j < 2; ++j) {
        const __m512 d0 = pixel[0][j] ? load16(pixel[0][j] + k) : zero;
        const __m512 d1 = pixel[1][j] ? load16(pixel[1][j] + k) : zero;
        __m512 col[4];
        output_grad_1d(d0, d1, col);
        for (int i = 0; i < 4; ++i) r[i][j] = col[i];
      }
      for (int i = 0; i < 4; ++i) {
        __m512 out[4];
        output_grad_1d(r[i][0], r[i][1], out);
        for (int j = 0; j < 4; ++j) store16(z + (i * 4 + j) * plane + t * K + k, out[j]);
      }
    }
  }
}

// Gᵀ: a transformed weight's gradient (4 positions) back to the 3 taps.
KILN_BF16_TARGET inline void weight_grad_1d(__m512 u0, __m512 u1, __m512 u2, __m512 u3, __m512 g[3]) {
  const __m512 half = _mm512_set1_ps(0.5f), h = _mm512_mul_ps(half, _mm512_add_ps(u1, u2));
  g[0] = _mm512_add_ps(u0, h);
  g[1] = _mm512_mul_ps(half, _mm512_sub_ps(u1, u2));
  g[2] = _mm512_add_ps(h, u3);
}

// dw (OHWI when channels_last, else OIHW) = Gᵀ dU G for input channels
// [c0, c1), from dU [16][C][K] float32; rounded once to bf16.
KILN_BF16_TARGET void transform_weight_grad(const WinogradConv& s, bool channels_last, const float* du, int64_t c0,
                                            int64_t c1, uint16_t* dw) {
  const int64_t C = s.in_channels, K = s.out_channels;
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
      __m512 u[kPositions];
      for (int xi = 0; xi < kPositions; ++xi) u[xi] = _mm512_loadu_ps(du + (xi * C + c) * K + k0);
      __m512 r[3][4];  // Gᵀ dU
      for (int j = 0; j < 4; ++j) {
        __m512 g[3];
        weight_grad_1d(u[j], u[4 + j], u[8 + j], u[12 + j], g);
        for (int i = 0; i < 3; ++i) r[i][j] = g[i];
      }
      for (int i = 0; i < 3; ++i) {
        __m512 g[3];
        weight_grad_1d(r[i][0], r[i][1], r[i][2], r[i][3], g);
        for (int j = 0; j < 3; ++j) {
          alignas(32) uint16_t lanes[16];
          store16(lanes, g[j]);
          for (int l = 0; l < 16; ++l) {
            const int64_t k = k0 + l;
            dw[channels_last ? ((k * 3 + i) * 3 + j) * C + c : ((k * C + c) * 3 + i) * 3 + j] = lanes[l];
          }
        }
      }
    }
}

// Blocks [b0, b1) of `block_tiles` tiles of the channel-last x into y, on
// the calling thread: input transform, the products 64 output channels at a
// time, each followed by their output transform.
KILN_BF16_TARGET void run_blocks(const WinogradConv& s, const Tiles& g, const uint16_t* x, const uint16_t* u,
                                 const Epilogue& e, int64_t block_tiles, int64_t b0, int64_t b1, uint16_t* y) {
  const int64_t C = s.in_channels, K = s.out_channels, pairs = C / 2;
  // The 16 positions' planes are read and written together by the
  // transforms: a multiple of 4 KiB apart they would share L1 sets (16 ways
  // into 8), so each plane is padded by one cache line.
  const int64_t vplane = block_tiles * C + 32, zplane = block_tiles * kBlockK + 16;
  uint16_t* v = thread_buffer<uint16_t>(static_cast<size_t>(kPositions * vplane));
  float* z = thread_buffer<float>(static_cast<size_t>(kPositions * zplane));
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t p0 = b * block_tiles, count = std::min(block_tiles, g.total - p0);
    transform_input(s, g, x, p0, count, vplane, v);
    for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
      for (int xi = 0; xi < kPositions; ++xi) {
        const uint16_t* uk = u + (k0 / kBlockK * kPositions + xi) * pairs * 2 * kBlockK;
        product(v + xi * vplane, C, uk, pairs, count, z + xi * zplane);
      }
      transform_output(s, g, z, p0, count, zplane, k0, e, y);
    }
  }
}

}  // namespace

bool winograd_bf16_cpu() {
  const Features& f = features();
  return f.has("avx512_bf16") && f.has("avx512bw") && f.has("avx512vl") && f.has("avx512dq") && !f.has("amx_bf16");
}

bool winograd_bf16_applies(const WinogradConv& s) {
  if (winograd_mode() == 0 || !winograd_bf16_cpu()) return false;
  if (s.in_channels < kBlockK || s.in_channels % kBlockK != 0) return false;
  if (s.out_channels < kBlockK || s.out_channels % kBlockK != 0) return false;
  if (s.batch <= 0 || s.out_height <= 0 || s.out_width <= 0) return false;
  const Tiles g(s);
  const double direct = 9.0 * static_cast<double>(s.out_height * s.out_width);
  return direct >= kMinSaving * static_cast<double>(kPositions * g.per_image);
}

namespace {

// Tiles per block: V within kBlockBytes, a whole number of register blocks.
int64_t block_tiles_for(int64_t channels) {
  const int64_t fit = kBlockBytes / (kPositions * channels * 2);
  return std::clamp<int64_t>(fit / kRows * kRows, kRows, kMaxBlockTiles);
}

// dst[j * ds + i] = src[i * ss + j] for i, j < 16, 16-bit elements: the
// rows interleaved 16, 32 and 64 bits at a time within 128-bit lanes, then
// the lanes combined; output register k then holds source column
// kColumn[k].
KILN_BF16_TARGET void transpose16(const uint16_t* src, int64_t ss, uint16_t* dst, int64_t ds) {
  static constexpr int kColumn[16] = {0, 4, 2, 6, 1, 5, 3, 7, 8, 12, 10, 14, 9, 13, 11, 15};
  __m256i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * ss));
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      r[4 * i + j] = _mm256_unpacklo_epi32(t[4 * i + j], t[4 * i + j + 2]);
      r[4 * i + j + 2] = _mm256_unpackhi_epi32(t[4 * i + j], t[4 * i + j + 2]);
    }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm256_unpacklo_epi64(r[8 * i + j], r[8 * i + j + 4]);
      t[8 * i + j + 4] = _mm256_unpackhi_epi64(r[8 * i + j], r[8 * i + j + 4]);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm256_permute2x128_si256(t[j], t[j + 8], 0x20);
    r[j + 8] = _mm256_permute2x128_si256(t[j], t[j + 8], 0x31);
  }
  for (int k = 0; k < 16; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kColumn[k] * ds), r[k]);
}

// dst [cols][rows] = src [rows][cols], 16-bit elements.
KILN_BF16_TARGET void transpose(const uint16_t* src, int64_t rows, int64_t cols, uint16_t* dst) {
  const int64_t full_rows = rows / 16 * 16, full_cols = cols / 16 * 16;
  for (int64_t i = 0; i < full_rows; i += 16)
    for (int64_t j = 0; j < full_cols; j += 16) transpose16(src + i * cols + j, cols, dst + j * rows + i, rows);
  for (int64_t i = 0; i < rows; ++i)  // the edges
    for (int64_t j = i < full_rows ? full_cols : 0; j < cols; ++j) dst[j * rows + i] = src[i * cols + j];
}

// dst [n][plane][channels] = src [n][channels][plane] for n < images, or the
// reverse (to_channel_last false).
void transpose_images(const uint16_t* src, int64_t images, int64_t channels, int64_t plane, bool to_channel_last,
                      uint16_t* dst) {
  for (int64_t n = 0; n < images; ++n) {
    const int64_t at = n * channels * plane;
    if (to_channel_last) transpose(src + at, channels, plane, dst + at);
    else transpose(src + at, plane, channels, dst + at);
  }
}

// Channel-first arrays: groups of whole images are transposed to
// channel-last in per-thread buffers (and the output back), so that the
// blocks run as they do on channel-last arrays, in cache.
void run_channel_first(const WinogradConv& s, int threads, const uint16_t* x, const uint16_t* u, const Epilogue& e,
                       uint16_t* y) {
  const Tiles g(s);
  const int64_t C = s.in_channels, K = s.out_channels;
  const int64_t in_plane = s.height * s.width, out_plane = s.out_height * s.out_width;
  // Images per group: as many as one block holds (at least one); the blocks
  // of a group are equal and a whole number of register blocks.
  const int64_t target = block_tiles_for(C);
  const int64_t group = std::max<int64_t>(1, target / g.per_image);
  const int64_t groups = (s.batch + group - 1) / group;
  parallel_for(
      threads, groups,
      [&](int64_t g0, int64_t g1) {
        uint16_t* xb = thread_buffer<uint16_t, 1>(static_cast<size_t>(group * in_plane * C));
        uint16_t* yb = thread_buffer<uint16_t, 2>(static_cast<size_t>(group * out_plane * K));
        for (int64_t gi = g0; gi < g1; ++gi) {
          const int64_t n0 = gi * group, count = std::min(group, s.batch - n0);
          transpose_images(x + n0 * C * in_plane, count, C, in_plane, true, xb);
          if (e.sum) transpose_images(e.sum + n0 * K * out_plane, count, K, out_plane, true, yb);
          WinogradConv part = s;
          part.batch = count;
          const Tiles pg(part);
          const int64_t blocks = (pg.total + target - 1) / target;
          const int64_t per_block = (pg.total + blocks - 1) / blocks;
          const int64_t block_tiles = (per_block + kRows - 1) / kRows * kRows;
          run_blocks(part, pg, xb, u, {e.bias, e.sum ? yb : nullptr, e.relu}, block_tiles, 0,
                     (pg.total + block_tiles - 1) / block_tiles, yb);
          transpose_images(yb, count, K, out_plane, false, y + n0 * K * out_plane);
        }
      },
      1);
}

}  // namespace

void winograd_conv_bf16(const engine::RunContext& run, const WinogradConv& s, bool channels_last, const BFloat16* x,
                        const BFloat16* w, const BFloat16* bias, const BFloat16* sum, bool relu, bool cache_weights,
                        BFloat16* y) {
  KILN_ASSERT(winograd_bf16_cpu());
  KILN_ASSERT(s.in_channels % kBlockK == 0 && s.out_channels % kBlockK == 0);
  const int64_t C = s.in_channels, K = s.out_channels;
  const Tiles g(s);
  const int64_t work = s.batch * K * s.out_height * s.out_width * C * 9;
  const int threads = work < onednn::kParallelWork ? 1 : std::max(1, run.num_threads);
  const auto* wbits = reinterpret_cast<const uint16_t*>(w);
  const auto u_elems = static_cast<size_t>(kPositions * C * K);
  const WeightWalk walk = weight_walk(s, channels_last);
  auto transform = [&](uint16_t* u) {
    parallel_for(
        threads, C / 2, [&](int64_t j0, int64_t j1) { transform_weights(s, walk, wbits, 2 * j0, 2 * j1, u); }, 1);
  };
  std::shared_ptr<const DerivedWeights> cached;
  if (cache_weights) {
    const std::string kind = fmt::format("winograd_bf16|{}x{}|{}{}", C, K, channels_last ? "last" : "first",
                                         s.transposed_weight ? "|t" : "");
    cached = weight_cache_find(kind, w, static_cast<size_t>(C * K * 9) * 2, u_elems * 2,
                               [&](void* out) { transform(static_cast<uint16_t*>(out)); });
  }
  WinogradScratch scratch(run.device);  // training: this call's transformed weights, from the device's pool
  uint16_t* own = cached ? nullptr : scratch.get<uint16_t>(static_cast<int64_t>(u_elems));
  if (own != nullptr) transform(own);
  const uint16_t* u = cached ? static_cast<const uint16_t*>(cached->data()) : own;
  const Epilogue e{reinterpret_cast<const uint16_t*>(bias), reinterpret_cast<const uint16_t*>(sum), relu};
  const auto* xbits = reinterpret_cast<const uint16_t*>(x);
  auto* ybits = reinterpret_cast<uint16_t*>(y);
  omp_set_num_threads(threads);
  if (!channels_last) return run_channel_first(s, threads, xbits, u, e, ybits);
  const int64_t block_tiles = block_tiles_for(C);
  const int64_t blocks = (g.total + block_tiles - 1) / block_tiles;
  parallel_for(
      threads, blocks, [&](int64_t b0, int64_t b1) { run_blocks(s, g, xbits, u, e, block_tiles, b0, b1, ybits); }, 1);
}


void winograd_weight_grad_bf16(const engine::RunContext& run, const WinogradConv& s, bool channels_last,
                               const BFloat16* x, const BFloat16* dy, BFloat16* dw) {
  KILN_ASSERT(winograd_bf16_cpu() && !s.transposed_weight);
  KILN_ASSERT(s.in_channels % kBlockK == 0 && s.out_channels % kBlockK == 0);
  const int64_t C = s.in_channels, K = s.out_channels, N = s.batch;
  const int64_t in_plane = s.height * s.width, out_plane = s.out_height * s.out_width;
  const Tiles g(s);
  const int64_t work = N * K * out_plane * C * 9;
  const int threads = work < onednn::kParallelWork ? 1 : std::max(1, run.num_threads);
  omp_set_num_threads(threads);
  // Images per chunk: V and dZ of a chunk within kChunkBytes (even chunks).
  const int64_t per_image = kPositions * g.per_image * (C + K) * 2;
  int64_t chunk = std::clamp<int64_t>(kChunkBytes / per_image, 1, N);
  const int64_t chunks = (N + chunk - 1) / chunk;
  chunk = (N + chunks - 1) / chunks;
  // Position planes padded apart, as in run_blocks.
  const int64_t vplane = chunk * g.per_image * C + 32, zplane = chunk * g.per_image * K + 32;
  WinogradScratch scratch(run.device);
  auto* v = scratch.get<uint16_t>(kPositions * vplane);
  auto* z = scratch.get<uint16_t>(kPositions * zplane);
  float* du = scratch.get<float>(kPositions * C * K);
  const auto* xbits = reinterpret_cast<const uint16_t*>(x);
  const auto* dybits = reinterpret_cast<const uint16_t*>(dy);
  WinogradConv one = s;  // one image
  one.batch = 1;
  const Tiles g1(one);
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t count = std::min(chunk, N - n0);
    parallel_for(
        threads, count,
        [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t n = n0 + i;
            const uint16_t* xi = xbits + n * C * in_plane;
            const uint16_t* dyi = dybits + n * K * out_plane;
            if (!channels_last) {  // this image channel-last, in per-thread buffers
              uint16_t* xb = thread_buffer<uint16_t, 1>(static_cast<size_t>(in_plane * C));
              uint16_t* yb = thread_buffer<uint16_t, 2>(static_cast<size_t>(out_plane * K));
              transpose_images(xi, 1, C, in_plane, true, xb);
              transpose_images(dyi, 1, K, out_plane, true, yb);
              xi = xb, dyi = yb;
            }
            transform_input(one, g1, xi, 0, g1.total, vplane, v + i * g.per_image * C);
            transform_output_grad(one, g1, dyi, 0, g1.total, zplane, z + i * g.per_image * K);
          }
        },
        1);
    run_winograd_product(*winograd_weight_grad_plan(kPositions, count * g.per_image, C, K, vplane, zplane,
                                                    dnnl::memory::data_type::bf16, n0 > 0, threads),
                         v, z, du);
  }
  auto* dwbits = reinterpret_cast<uint16_t*>(dw);
  parallel_for(
      threads, C, [&](int64_t c0, int64_t c1) { transform_weight_grad(s, channels_last, du, c0, c1, dwbits); }, 1);
}

}  // namespace kiln::cpu
