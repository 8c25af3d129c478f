// Channel-last bfloat16 Winograd F(2x2, 3x3): see conv_winograd_bf16.h.
//
// Layouts (bf16 unless noted; T = tiles in a block, C / K = input / output
// channels, tile p = (image, tile row, tile column) over the whole batch):
//   U [K/64][16][C/2][64][2]  transformed weights G g Gᵀ, for each block of 64
//                             output channels and transform position: input
//                             channel pairs, 64 channels, the pair -- the
//                             operand order of vdpbf16ps
//   V [16][T][C]              transformed input tiles Bᵀ d B of one block
//   Z [16][T][64] float32     V . U for one block of 64 output channels
// and the output tile is Aᵀ Z A. Every function that uses AVX-512 carries
// the target attribute below and is reached only after winograd_bf16_cpu().
#include "backends/cpu/conv_winograd_bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/onednn_util.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/weight_cache.h"
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

// ---- 16 channels as one vector of float32

KILN_BF16_TARGET inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

KILN_BF16_TARGET inline void store16(uint16_t* p, __m512 v) {
  // vcvtneps2bf16: round to nearest even, NaN stays NaN.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
}

// ---- the weight transform (once per weight change in inference)

// G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]: three taps -> four positions.
void weight_1d(const float g[3], float u[4]) {
  u[0] = g[0];
  u[1] = 0.5f * (g[0] + g[1] + g[2]);
  u[2] = 0.5f * (g[0] - g[1] + g[2]);
  u[3] = g[2];
}

// U (layout above) from w [K][3][3][C], for input channels [c0, c1).
void transform_weights(const WinogradConv& s, const uint16_t* w, int64_t c0, int64_t c1, uint16_t* u) {
  const int64_t C = s.in_channels, K = s.out_channels, pairs = C / 2;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t kb = k / kBlockK, kk = k % kBlockK;
    for (int64_t c = c0; c < c1; ++c) {
      float g[3][3], rows[4][3], v[4];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) g[i][j] = bf16_to_float({w[((k * 3 + i) * 3 + j) * C + c]});
      for (int j = 0; j < 3; ++j) {  // G g: the three columns
        const float col[3] = {g[0][j], g[1][j], g[2][j]};
        weight_1d(col, v);
        for (int i = 0; i < 4; ++i) rows[i][j] = v[i];
      }
      for (int i = 0; i < 4; ++i) {  // (G g) Gᵀ: each row
        weight_1d(rows[i], v);
        for (int j = 0; j < 4; ++j) {
          const int64_t xi = i * 4 + j;
          u[(((kb * kPositions + xi) * pairs + c / 2) * kBlockK + kk) * 2 + (c & 1)] = float_to_bf16(v[j]).bits;
        }
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
};

// V [16][T][C] for tiles [p0, p0 + count), positions `plane` elements apart.
KILN_BF16_TARGET void transform_input(const WinogradConv& s, const Tiles& g, const uint16_t* x, int64_t p0,
                                      int64_t count, int64_t plane, uint16_t* v) {
  const int64_t C = s.in_channels, H = s.height, W = s.width;
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t t = 0; t < count; ++t) {
    const int64_t p = p0 + t, n = p / g.per_image, ty = p % g.per_image / g.tiles_w, tx = p % g.tiles_w;
    const int64_t y0 = ty * 2 - s.pad_top, x0 = tx * 2 - s.pad_left;
    const uint16_t* pixel[4][4];  // null: padding
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const int64_t yy = y0 + i, xx = x0 + j;
        pixel[i][j] = yy >= 0 && yy < H && xx >= 0 && xx < W ? x + ((n * H + yy) * W + xx) * C : nullptr;
      }
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

// Per-thread scratch that grows and is kept (OpenMP threads persist).
template <typename T>
T* thread_scratch(size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

KILN_BF16_TARGET void run_blocks(const WinogradConv& s, const Tiles& g, const uint16_t* x, const uint16_t* u,
                                 const Epilogue& e, int64_t block_tiles, int64_t b0, int64_t b1, uint16_t* y) {
  const int64_t C = s.in_channels, K = s.out_channels, pairs = C / 2;
  // The 16 positions' planes are read and written together by the
  // transforms: a multiple of 4 KiB apart they would share L1 sets (16 ways
  // into 8), so each plane is padded by one cache line.
  const int64_t vplane = block_tiles * C + 32, zplane = block_tiles * kBlockK + 16;
  uint16_t* v = thread_scratch<uint16_t>(static_cast<size_t>(kPositions * vplane));
  float* z = thread_scratch<float>(static_cast<size_t>(kPositions * zplane));
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
  return f.has("avx512_bf16") && f.has("avx512bw") && f.has("avx512vl") && !f.has("amx_bf16");
}

bool winograd_bf16_applies(const WinogradConv& s) {
  if (winograd_mode() == 0 || s.transposed_weight || !winograd_bf16_cpu()) return false;
  if (s.in_channels < kBlockK || s.in_channels % kBlockK != 0) return false;
  if (s.out_channels < kBlockK || s.out_channels % kBlockK != 0) return false;
  if (s.batch <= 0 || s.out_height <= 0 || s.out_width <= 0) return false;
  const Tiles g(s);
  const double direct = 9.0 * static_cast<double>(s.out_height * s.out_width);
  return direct >= kMinSaving * static_cast<double>(kPositions * g.per_image);
}

void winograd_conv_bf16(const engine::RunContext& run, const WinogradConv& s, const BFloat16* x, const BFloat16* w,
                        const BFloat16* bias, const BFloat16* sum, bool relu, bool cache_weights, BFloat16* y) {
  KILN_ASSERT(winograd_bf16_cpu() && !s.transposed_weight);
  KILN_ASSERT(s.in_channels % kBlockK == 0 && s.out_channels % kBlockK == 0);
  const int64_t C = s.in_channels, K = s.out_channels;
  const Tiles g(s);
  const int64_t work = s.batch * K * s.out_height * s.out_width * C * 9;
  const int threads = work < onednn::kParallelWork ? 1 : std::max(1, run.num_threads);
  const auto* wbits = reinterpret_cast<const uint16_t*>(w);
  const auto u_elems = static_cast<size_t>(kPositions * C * K);
  auto transform = [&](uint16_t* u) {
    parallel_for(
        threads, C / 2, [&](int64_t j0, int64_t j1) { transform_weights(s, wbits, 2 * j0, 2 * j1, u); }, 1);
  };
  std::shared_ptr<const DerivedWeights> cached;
  if (cache_weights) {
    cached = weight_cache_find(fmt::format("winograd_bf16|{}x{}|", C, K), w, static_cast<size_t>(C * K * 9) * 2,
                               u_elems * 2, [&](void* out) { transform(static_cast<uint16_t*>(out)); });
  }
  std::vector<uint16_t> own;
  if (!cached) {
    own.resize(u_elems);
    transform(own.data());
  }
  const uint16_t* u = cached ? static_cast<const uint16_t*>(cached->data()) : own.data();
  // Tiles per block: V within kBlockBytes, a whole number of register blocks.
  const int64_t fit = kBlockBytes / (kPositions * C * 2);
  const int64_t block_tiles = std::clamp<int64_t>(fit / kRows * kRows, kRows, kMaxBlockTiles);
  const int64_t blocks = (g.total + block_tiles - 1) / block_tiles;
  const Epilogue e{reinterpret_cast<const uint16_t*>(bias), reinterpret_cast<const uint16_t*>(sum), relu};
  const auto* xbits = reinterpret_cast<const uint16_t*>(x);
  auto* ybits = reinterpret_cast<uint16_t*>(y);
  omp_set_num_threads(threads);
  parallel_for(
      threads, blocks, [&](int64_t b0, int64_t b1) { run_blocks(s, g, xbits, u, e, block_tiles, b0, b1, ybits); }, 1);
}

}  // namespace kiln::cpu
