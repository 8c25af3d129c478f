// Winograd F(m x m, 3 x 3) convolution: see conv_winograd.h.
//
// Layouts (floats; A = m + 2 and A2 = A * A, P = tiles in the current chunk
// of images, tile p = (image in chunk, tile row, tile column)):
//   U [A2][C][K]  transformed weights G g Gᵀ
//   V [A2][P][C]  transformed input tiles Bᵀ d B (positions ldv floats apart)
//   Z [A2][P][K]  = V . U per transform position (one batched oneDNN matmul;
//                 positions ldz floats apart)
// and the output tile is Aᵀ Z A. Transforms work on 8 channels at once (the
// lanes of one AVX2 register): NCHW rows are transposed 8 x 8 into a
// per-thread [A][columns][8] buffer on the way in, and back on the way out,
// where bias, residual and ReLU are applied to whole output rows.
#include "backends/cpu/conv_winograd.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/onednn_util.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/thread_buffer.h"
#include "backends/cpu/weight_cache.h"
#include "backends/cpu/winograd_common.h"
#include "ir/error.h"
#include "runtime/storage.h"

namespace kiln::cpu {
namespace {

namespace dn = onednn;
using dnnl::memory;

constexpr int kLanes = 8;  // channels per vector: one AVX2 register of floats

// Below this many input or output channels the transforms cost more than the
// products save: an estimate (bench/conv_bench.cc measures 64..512 channels,
// where Winograd pays; fewer channels were not measured).
constexpr int64_t kMinChannels = 16;
// Winograd must cut the multiply-adds by at least this factor (after padding
// the output to whole tiles) to pay for its transforms.
constexpr double kMinSaving = 1.5;
// Bytes of V and Z per chunk of images: large enough for efficient matmuls,
// small enough to stay near the last-level cache.
constexpr int64_t kChunkBytes = int64_t{12} << 20;

// ---- 1-D transforms, each on kLanes independent columns: the i-th input
// vector is in[i * is + lane], the i-th output vector out[i * os + lane].
// Written on vectors of kLanes floats (GCC/Clang vector extensions: one AVX2
// register): as loops over the lanes, the compiler could not rule out that
// `out` overlaps `in` and kept the input transform's second pass scalar,
// two thirds of its time.

using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));
inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

template <int M>
struct Transforms;

template <>
struct Transforms<2> {
  // Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
  static void input(const float* d, ptrdiff_t is, float* v, ptrdiff_t os) {
    Vec d0 = load(d), d1 = load(d + is), d2 = load(d + 2 * is), d3 = load(d + 3 * is);
    store(v, d0 - d2);
    store(v + os, d1 + d2);
    store(v + 2 * os, d2 - d1);
    store(v + 3 * os, d1 - d3);
  }
  // Aᵀ = [1 1 1 0; 0 1 -1 -1]
  static void output(const float* z, ptrdiff_t is, float* y, ptrdiff_t os) {
    Vec z0 = load(z), z1 = load(z + is), z2 = load(z + 2 * is), z3 = load(z + 3 * is);
    store(y, z0 + z1 + z2);
    store(y + os, z1 - z2 - z3);
  }
  // G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
  static void weight(const float* g, ptrdiff_t is, float* u, ptrdiff_t os) {
    Vec g0 = load(g), g1 = load(g + is), g2 = load(g + 2 * is);
    store(u, g0);
    store(u + os, 0.5f * (g0 + g1 + g2));
    store(u + 2 * os, 0.5f * (g0 - g1 + g2));
    store(u + 3 * os, g2);
  }
  // The weight gradient's transforms, transposes of the two above.
  // A = (Aᵀ)ᵀ: an output tile's gradient into the transform domain.
  static void output_grad(const float* y, ptrdiff_t is, float* z, ptrdiff_t os) {
    Vec y0 = load(y), y1 = load(y + is);
    store(z, y0);
    store(z + os, y0 + y1);
    store(z + 2 * os, y0 - y1);
    store(z + 3 * os, -y1);
  }
  // Gᵀ: a transformed weight's gradient back to the 3 taps.
  static void weight_grad(const float* u, ptrdiff_t is, float* g, ptrdiff_t os) {
    Vec u0 = load(u), u1 = load(u + is), u2 = load(u + 2 * is), u3 = load(u + 3 * is);
    Vec h = 0.5f * (u1 + u2);
    store(g, u0 + h);
    store(g + os, 0.5f * (u1 - u2));
    store(g + 2 * os, h + u3);
  }
};

template <>
struct Transforms<4> {
  // Bᵀ = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
  static void input(const float* d, ptrdiff_t is, float* v, ptrdiff_t os) {
    Vec d0 = load(d), d1 = load(d + is), d2 = load(d + 2 * is), d3 = load(d + 3 * is), d4 = load(d + 4 * is),
        d5 = load(d + 5 * is);
    store(v, 4.0f * d0 - 5.0f * d2 + d4);
    store(v + os, (d3 + d4) - 4.0f * (d1 + d2));
    store(v + 2 * os, (d4 - d3) + 4.0f * (d1 - d2));
    store(v + 3 * os, (d4 - d2) + 2.0f * (d3 - d1));
    store(v + 4 * os, (d4 - d2) - 2.0f * (d3 - d1));
    store(v + 5 * os, 4.0f * d1 - 5.0f * d3 + d5);
  }
  // Aᵀ = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
  static void output(const float* z, ptrdiff_t is, float* y, ptrdiff_t os) {
    Vec z0 = load(z), z1 = load(z + is), z2 = load(z + 2 * is), z3 = load(z + 3 * is), z4 = load(z + 4 * is),
        z5 = load(z + 5 * is);
    Vec a = z1 + z2, b = z1 - z2, c = z3 + z4, e = z3 - z4;
    store(y, z0 + a + c);
    store(y + os, b + 2.0f * e);
    store(y + 2 * os, a + 4.0f * c);
    store(y + 3 * os, b + 8.0f * e + z5);
  }
  // G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]
  static void weight(const float* g, ptrdiff_t is, float* u, ptrdiff_t os) {
    Vec g0 = load(g), g1 = load(g + is), g2 = load(g + 2 * is);
    constexpr float k6 = 1.0f / 6, k12 = 1.0f / 12, k24 = 1.0f / 24;
    store(u, 0.25f * g0);
    store(u + os, -k6 * (g0 + g1 + g2));
    store(u + 2 * os, -k6 * (g0 - g1 + g2));
    store(u + 3 * os, k24 * g0 + k12 * g1 + k6 * g2);
    store(u + 4 * os, k24 * g0 - k12 * g1 + k6 * g2);
    store(u + 5 * os, g2);
  }
  // A = (Aᵀ)ᵀ
  static void output_grad(const float* y, ptrdiff_t is, float* z, ptrdiff_t os) {
    Vec y0 = load(y), y1 = load(y + is), y2 = load(y + 2 * is), y3 = load(y + 3 * is);
    Vec e = y0 + y2, o = y1 + y3, e4 = y0 + 4.0f * y2, o4 = 2.0f * y1 + 8.0f * y3;
    store(z, y0);
    store(z + os, e + o);
    store(z + 2 * os, e - o);
    store(z + 3 * os, e4 + o4);
    store(z + 4 * os, e4 - o4);
    store(z + 5 * os, y3);
  }
  // Gᵀ
  static void weight_grad(const float* u, ptrdiff_t is, float* g, ptrdiff_t os) {
    Vec u0 = load(u), u1 = load(u + is), u2 = load(u + 2 * is), u3 = load(u + 3 * is), u4 = load(u + 4 * is),
        u5 = load(u + 5 * is);
    constexpr float k6 = 1.0f / 6, k12 = 1.0f / 12, k24 = 1.0f / 24;
    Vec a = u1 + u2, b = u3 + u4;
    store(g, 0.25f * u0 - k6 * a + k24 * b);
    store(g + os, k6 * (u2 - u1) + k12 * (u3 - u4));
    store(g + 2 * os, k6 * (b - a) + u5);
  }
};

// ---- 2-D transforms on tiles of kLanes-wide vectors

// dst = T src Tᵀ for the 1-D transform T (F: In vectors -> Out vectors, as
// the Transforms above): src is In x In vectors, (i, j) at src + i * src_row +
// j * src_col; dst Out x Out vectors, (i, j) at dst + i * dst_row + j * dst_col.
template <int In, int Out, void (*F)(const float*, ptrdiff_t, float*, ptrdiff_t)>
void separable(const float* src, ptrdiff_t src_row, ptrdiff_t src_col, float* dst, ptrdiff_t dst_row,
               ptrdiff_t dst_col) {
  float t[Out * In * kLanes];  // T src: (i, j) at t + (i * In + j) * kLanes
  for (int j = 0; j < In; ++j) F(src + j * src_col, src_row, t + j * kLanes, In * kLanes);
  for (int i = 0; i < Out; ++i) F(t + i * In * kLanes, kLanes, dst + i * dst_row, dst_col);
}

// d: A x A vectors, rows `row_stride` floats apart, columns kLanes apart ->
// Bᵀ d B, whose vector (i, j) goes to v + (i * A + j) * v_stride.
template <int M>
void input_tile(const float* d, ptrdiff_t row_stride, float* v, ptrdiff_t v_stride) {
  constexpr int A = M + 2;
  separable<A, A, Transforms<M>::input>(d, row_stride, kLanes, v, A * v_stride, v_stride);
}

// z: A x A vectors, (i, j) at z + (i * A + j) * z_stride -> y: M x M vectors
// Aᵀ z A, rows `row_stride` floats apart, columns kLanes apart.
template <int M>
void output_tile(const float* z, ptrdiff_t z_stride, float* y, ptrdiff_t row_stride) {
  constexpr int A = M + 2;
  separable<A, M, Transforms<M>::output>(z, A * z_stride, z_stride, y, row_stride, kLanes);
}

// g [3][3][kLanes] -> u [A][A][kLanes] = G g Gᵀ.
template <int M>
void weight_tile(const float* g, float* u) {
  constexpr int A = M + 2;
  separable<3, A, Transforms<M>::weight>(g, 3 * kLanes, kLanes, u, A * kLanes, kLanes);
}

// dy: M x M vectors, rows `row_stride` floats apart, columns kLanes apart ->
// A dy Aᵀ, whose vector (i, j) goes to z + (i * A + j) * z_stride: the
// gradient of Z for an output tile's gradient.
template <int M>
void output_grad_tile(const float* dy, ptrdiff_t row_stride, float* z, ptrdiff_t z_stride) {
  constexpr int A = M + 2;
  separable<M, A, Transforms<M>::output_grad>(dy, row_stride, kLanes, z, A * z_stride, z_stride);
}

// du [A][A][kLanes] -> g [3][3][kLanes] = Gᵀ du G: the gradient of the
// weights for the gradient of their transform.
template <int M>
void weight_grad_tile(const float* du, float* g) {
  constexpr int A = M + 2;
  separable<A, 3, Transforms<M>::weight_grad>(du, A * kLanes, kLanes, g, 3 * kLanes, kLanes);
}

// dst[j * ds + i] = src[i * ss + j] for i, j < 8.
inline void transpose8(const float* src, ptrdiff_t ss, float* dst, ptrdiff_t ds) {
#ifdef __AVX__
  __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + ss), r2 = _mm256_loadu_ps(src + 2 * ss),
         r3 = _mm256_loadu_ps(src + 3 * ss), r4 = _mm256_loadu_ps(src + 4 * ss), r5 = _mm256_loadu_ps(src + 5 * ss),
         r6 = _mm256_loadu_ps(src + 6 * ss), r7 = _mm256_loadu_ps(src + 7 * ss);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
         t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
         t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
         s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2)),
         s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2)),
         s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  _mm256_storeu_ps(dst, _mm256_permute2f128_ps(s0, s4, 0x20));
  _mm256_storeu_ps(dst + ds, _mm256_permute2f128_ps(s1, s5, 0x20));
  _mm256_storeu_ps(dst + 2 * ds, _mm256_permute2f128_ps(s2, s6, 0x20));
  _mm256_storeu_ps(dst + 3 * ds, _mm256_permute2f128_ps(s3, s7, 0x20));
  _mm256_storeu_ps(dst + 4 * ds, _mm256_permute2f128_ps(s0, s4, 0x31));
  _mm256_storeu_ps(dst + 5 * ds, _mm256_permute2f128_ps(s1, s5, 0x31));
  _mm256_storeu_ps(dst + 6 * ds, _mm256_permute2f128_ps(s2, s6, 0x31));
  _mm256_storeu_ps(dst + 7 * ds, _mm256_permute2f128_ps(s3, s7, 0x31));
#else
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) dst[j * ds + i] = src[i * ss + j];
#endif
}

// epilogue of 8 floats as one AVX2 vector (res may be null or alias dst). The
// compiler kept the generic loop below scalar (res may alias dst), which made
// the residual add cost as much as the whole output transform.
inline void epilogue8(const float* v, float bias, const float* res, bool relu, float* dst) {
#ifdef __AVX__
  __m256 t = _mm256_add_ps(_mm256_loadu_ps(v), _mm256_set1_ps(bias));
  if (res != nullptr) t = _mm256_add_ps(t, _mm256_loadu_ps(res));
  if (relu) t = _mm256_max_ps(t, _mm256_setzero_ps());
  _mm256_storeu_ps(dst, t);
#else
  for (int i = 0; i < 8; ++i) {
    float t = v[i] + bias + (res != nullptr ? res[i] : 0.0f);
    dst[i] = relu ? std::max(t, 0.0f) : t;
  }
#endif
}

// dst[i] = act(v[i] + bias + res[i]) for i < n (res may be null or alias dst).
inline void epilogue(const float* v, int64_t n, float bias, const float* res, bool relu, float* dst) {
  if (res != nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      float t = v[i] + bias + res[i];
      dst[i] = relu ? std::max(t, 0.0f) : t;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      float t = v[i] + bias;
      dst[i] = relu ? std::max(t, 0.0f) : t;
    }
  }
}

// Asks for the cache lines of [p, p + floats) to be fetched into L2 (for
// writing when `write`): the transforms read and write short row segments of
// many channel planes, too many streams for the hardware prefetcher.
inline void prefetch_span(const float* p, int64_t floats, bool write = false) {
  const char* begin = reinterpret_cast<const char*>(p);
  const char* end = reinterpret_cast<const char*>(p + floats);
  for (const char* c = begin; c < end; c += 64) {
    if (write) __builtin_prefetch(c, 1, 2);
    else __builtin_prefetch(c, 0, 2);
  }
}


// U [A2][C][K] from the weights.
template <int M>
void transform_weights(const WinogradConv& s, int threads, const float* w, float* u) {
  constexpr int A2 = (M + 2) * (M + 2);
  const int64_t C = s.in_channels, K = s.out_channels;
  parallel_for(
      threads, C,
      [&](int64_t c0, int64_t c1) {
        float g[9 * kLanes], v[A2 * kLanes];
        for (int64_t c = c0; c < c1; ++c) {
          for (int64_t k0 = 0; k0 < K; k0 += kLanes) {
            const int64_t nk = std::min<int64_t>(kLanes, K - k0);
            std::fill(g, g + 9 * kLanes, 0.0f);
            for (int64_t l = 0; l < nk; ++l) {
              const int64_t k = k0 + l;
              for (int t = 0; t < 9; ++t) {
                // Backward data: the forward weight [C][K][3][3] (this C and K
                // swapped), rotated by 180 degrees.
                g[t * kLanes + l] = s.transposed_weight ? w[(c * K + k) * 9 + (8 - t)] : w[(k * C + c) * 9 + t];
              }
            }
            weight_tile<M>(g, v);
            for (int xi = 0; xi < A2; ++xi) std::memcpy(u + (xi * C + c) * K + k0, v + xi * kLanes, nk * sizeof(float));
          }
        }
      },
      1);
}

// Floats between the transform positions' rows of V or Z holding `floats`:
// rounded up to a cache line, plus one, so that no two positions fall into the
// same cache set (4 KiB aliasing).
int64_t padded_stride(int64_t floats) { return (floats + 15) / 16 * 16 + 16; }

// Tile geometry of one problem.
template <int M>
struct Geometry {
  static constexpr int A = M + 2, A2 = A * A;
  int64_t tiles_h, tiles_w, tiles;  // per image
  explicit Geometry(const WinogradConv& s)
      : tiles_h((s.out_height + M - 1) / M), tiles_w((s.out_width + M - 1) / M), tiles(tiles_h * tiles_w) {}
};

// The input side of a transform: for images [n0, n0 + count) of src
// [image][channels][height][width], tile p = (image in chunk, tile row ty,
// tile column tx) covers Rows rows from ty M - top and as many columns (of
// `cols` per tile row) from tx M - left, zeros outside the planes. Each tile's
// Rows x Rows block of every channel goes through tile(d, row_stride, dst,
// ld), which writes the A2 transformed vectors of kLanes channels ld floats
// apart; out is [A2][P][channels] (positions ld floats apart).
template <int M, int Rows, typename Tile>
void transform_tiles(const Geometry<M>& g, int threads, const float* src, int64_t channels, int64_t height,
                     int64_t width, int64_t top, int64_t left, int64_t cols, int64_t n0, int64_t count, int64_t ld,
                     float* out, Tile&& tile) {
  constexpr int A2 = (M + 2) * (M + 2);
  const int64_t plane = height * width;
  // Source columns [0, x_end) land in buffer columns [left, left + x_end).
  const int64_t x_end = std::max<int64_t>(0, std::min(width, cols - left));
  const int64_t blocks = (channels + kLanes - 1) / kLanes, block_floats = Rows * cols * kLanes;
  // Per unit (image, tile row): all channels' rows in buf [block][Rows][cols][kLanes],
  // then tile by tile all channels, so that each row of `out` is written whole.
  parallel_for(
      threads, count * g.tiles_h,
      [&](int64_t u0, int64_t u1) {
        float* buf = thread_buffer<float>(static_cast<size_t>(blocks * block_floats));
        float part[A2 * kLanes];
        for (int64_t unit = u0; unit < u1; ++unit) {
          const int64_t n = n0 + unit / g.tiles_h, ty = unit % g.tiles_h;
          if (unit + 1 < u1) {  // the next unit's rows, while this one is transformed
            const int64_t nn = n0 + (unit + 1) / g.tiles_h, ny = (unit + 1) % g.tiles_h;
            const int64_t y0 = std::max<int64_t>(0, ny * M - top), y1 = std::min(height, ny * M - top + Rows);
            if (y0 < y1)
              for (int64_t c = 0; c < channels; ++c)
                prefetch_span(src + (nn * channels + c) * plane + y0 * width, (y1 - y0) * width);
          }
          std::fill(buf, buf + blocks * block_floats, 0.0f);
          for (int64_t b = 0; b < blocks; ++b) {
            const int64_t c0 = b * kLanes, nc = std::min<int64_t>(kLanes, channels - c0);
            for (int r = 0; r < Rows; ++r) {
              const int64_t y = ty * M - top + r;
              if (y < 0 || y >= height) continue;
              const float* from = src + (n * channels + c0) * plane + y * width;
              float* row = buf + b * block_floats + (r * cols + left) * kLanes;
              int64_t xi = 0;
              if (nc == kLanes)
                for (; xi + 8 <= x_end; xi += 8) transpose8(from + xi, plane, row + xi * kLanes, kLanes);
              for (; xi < x_end; ++xi)
                for (int64_t l = 0; l < nc; ++l) row[xi * kLanes + l] = from[l * plane + xi];
            }
          }
          for (int64_t tx = 0; tx < g.tiles_w; ++tx) {
            const int64_t p = (n - n0) * g.tiles + ty * g.tiles_w + tx;
            for (int64_t b = 0; b < blocks; ++b) {
              const int64_t c0 = b * kLanes, nc = std::min<int64_t>(kLanes, channels - c0);
              const float* d = buf + b * block_floats + tx * M * kLanes;
              float* dst = out + p * channels + c0;
              if (nc == kLanes) {
                tile(d, cols * kLanes, dst, ld);
              } else {
                tile(d, cols * kLanes, part, kLanes);
                for (int xi = 0; xi < A2; ++xi) std::memcpy(dst + xi * ld, part + xi * kLanes, nc * sizeof(float));
              }
            }
          }
        }
      },
      1);
}

// V [A2][P][C] (positions ldv floats apart) = Bᵀ d B for images [n0, n0 + count).
template <int M>
void transform_input(const WinogradConv& s, const Geometry<M>& g, int threads, const float* x, int64_t n0,
                     int64_t count, int64_t ldv, float* v) {
  transform_tiles<M, M + 2>(g, threads, x, s.in_channels, s.height, s.width, s.pad_top, s.pad_left,
                            g.tiles_w * M + 2, n0, count, ldv, v, input_tile<M>);
}

// y = act(Aᵀ Z A + bias + sum) for images [n0, n0 + count).
template <int M>
void transform_output(const WinogradConv& s, const Geometry<M>& g, int threads, const float* z, const float* bias,
                      const float* sum, bool relu, int64_t n0, int64_t count, int64_t ldz, float* y) {
  constexpr int A = M + 2, A2 = A * A;
  const int64_t K = s.out_channels, OH = s.out_height, OW = s.out_width, plane = OH * OW;
  const int64_t cols = g.tiles_w * M;
  const int64_t blocks = (K + kLanes - 1) / kLanes, block_floats = M * cols * kLanes;
  // Per unit (image, tile row): tile by tile all output channels into buf
  // [block][M][cols][kLanes] (reading each row of Z whole), then the rows out.
  parallel_for(
      threads, count * g.tiles_h,
      [&](int64_t u0, int64_t u1) {
        float* buf = thread_buffer<float>(static_cast<size_t>(blocks * block_floats));
        float tile[A2 * kLanes] = {};
        float block[8 * 8];
        for (int64_t unit = u0; unit < u1; ++unit) {
          const int64_t n = n0 + unit / g.tiles_h, ty = unit % g.tiles_h;
          {  // this unit's output rows, while its tiles are transformed
            const int64_t rows = std::min<int64_t>(M, OH - ty * M);
            for (int64_t k = 0; k < K; ++k) {
              const int64_t at = (n * K + k) * plane + ty * M * OW;
              if (sum != nullptr) prefetch_span(sum + at, rows * OW);
              if (sum != y) prefetch_span(y + at, rows * OW, true);
            }
          }
          for (int64_t tx = 0; tx < g.tiles_w; ++tx) {
            const int64_t p = (n - n0) * g.tiles + ty * g.tiles_w + tx;
            for (int64_t b = 0; b < blocks; ++b) {
              const int64_t k0 = b * kLanes, nk = std::min<int64_t>(kLanes, K - k0);
              const float* src = z + p * K + k0;
              float* out = buf + b * block_floats + tx * M * kLanes;
              if (nk == kLanes) {
                output_tile<M>(src, ldz, out, cols * kLanes);
              } else {
                for (int xi = 0; xi < A2; ++xi) std::memcpy(tile + xi * kLanes, src + xi * ldz, nk * sizeof(float));
                output_tile<M>(tile, kLanes, out, cols * kLanes);
              }
            }
          }
          for (int64_t b = 0; b < blocks; ++b) {
            const int64_t k0 = b * kLanes, nk = std::min<int64_t>(kLanes, K - k0);
            for (int r = 0; r < M; ++r) {
              const int64_t oy = ty * M + r;
              if (oy >= OH) break;
              const float* row = buf + b * block_floats + r * cols * kLanes;
              const int64_t base = (n * K + k0) * plane + oy * OW;
              int64_t ox = 0;
              if (nk == kLanes) {
                for (; ox + 8 <= OW; ox += 8) {
                  transpose8(row + ox * kLanes, kLanes, block, 8);
                  for (int l = 0; l < kLanes; ++l) {
                    const int64_t at = base + l * plane + ox;
                    epilogue8(block + l * 8, bias ? bias[k0 + l] : 0.0f, sum ? sum + at : nullptr, relu, y + at);
                  }
                }
              }
              for (; ox < OW; ++ox)
                for (int64_t l = 0; l < nk; ++l) {
                  const int64_t at = base + l * plane + ox;
                  epilogue(row + ox * kLanes + l, 1, bias ? bias[k0 + l] : 0.0f, sum ? sum + at : nullptr, relu,
                           y + at);
                }
            }
          }
        }
      },
      1);
}

// dZ [A2][P][K] (positions ldz floats apart) = A dy Aᵀ per output tile, for
// images [n0, n0 + count): outputs beyond the image (the padding up to whole
// tiles) have no gradient.
template <int M>
void transform_output_grad(const WinogradConv& s, const Geometry<M>& g, int threads, const float* dy, int64_t n0,
                           int64_t count, int64_t ldz, float* z) {
  transform_tiles<M, M>(g, threads, dy, s.out_channels, s.out_height, s.out_width, 0, 0, g.tiles_w * M, n0, count,
                        ldz, z, output_grad_tile<M>);
}

// dw [K][C][3][3] = Gᵀ (Σ over `parts` of du) G, du [parts][A2][C][K].
template <int M>
void transform_weight_grad(const WinogradConv& s, int threads, const float* du, int parts, float* dw) {
  constexpr int A2 = (M + 2) * (M + 2);
  const int64_t C = s.in_channels, K = s.out_channels, part = A2 * C * K;
  parallel_for(
      threads, C,
      [&](int64_t c0, int64_t c1) {
        float u[A2 * kLanes], g[9 * kLanes];
        for (int64_t c = c0; c < c1; ++c) {
          for (int64_t k0 = 0; k0 < K; k0 += kLanes) {
            const int64_t nk = std::min<int64_t>(kLanes, K - k0);
            std::fill(u, u + A2 * kLanes, 0.0f);
            for (int xi = 0; xi < A2; ++xi)
              for (int q = 0; q < parts; ++q) {
                const float* src = du + q * part + (xi * C + c) * K + k0;
                for (int64_t l = 0; l < nk; ++l) u[xi * kLanes + l] += src[l];
              }
            weight_grad_tile<M>(u, g);
            for (int64_t l = 0; l < nk; ++l)
              for (int t = 0; t < 9; ++t) dw[((k0 + l) * C + c) * 9 + t] = g[t * kLanes + l];
          }
        }
      },
      1);
}

// Two ways to share the work among threads. With at least as many images as
// threads, each thread takes a contiguous share of the batch and runs all
// steps on it alone, in chunks: one parallel region per call (after the
// weight transform), no barrier between the steps, which matters on a
// loaded machine where a descheduled thread stalls every barrier. With fewer
// images (or where the caller says a share per thread does not pay), the
// threads share each step of one chunk at a time.
template <int M>
struct WorkSplit {
  static constexpr int A2 = (M + 2) * (M + 2);
  int threads = 1, workers = 1;  // workers: threads holding their own chunk
  int64_t chunk = 0;             // images per chunk
  int64_t ldv = 0, ldz = 0;      // row strides of V and Z (dZ) in a chunk

  // `per_thread_pays(threads)`: whether a share per thread pays, given enough images.
  template <typename Pays>
  WorkSplit(const engine::RunContext& run, const WinogradConv& s, const Geometry<M>& g, Pays&& per_thread_pays) {
    const int64_t N = s.batch, C = s.in_channels, K = s.out_channels;
    // The work of the direct convolution decides the threads, as for oneDNN's.
    const int64_t work = N * K * s.out_height * s.out_width * C * 9;
    threads = work < dn::kParallelWork ? 1 : std::max(1, run.num_threads);
    omp_set_num_threads(threads);
    workers = threads > 1 && N >= threads && per_thread_pays(threads) ? threads : 1;
    // Every chunk's matmul reads all of U (or reads and writes all of dU):
    // chunks at least as large as U keep that traffic below the traffic of V
    // and Z (512 channels: U is 36 MiB).
    const int64_t per_image = A2 * g.tiles * (C + K) * static_cast<int64_t>(sizeof(float));
    const int64_t budget = std::max<int64_t>(kChunkBytes, A2 * C * K * static_cast<int64_t>(sizeof(float))) / workers;
    const int64_t share = (N + workers - 1) / workers;  // images per worker (parallel_shares' split)
    chunk = std::clamp<int64_t>(budget / std::max<int64_t>(per_image, 1), 1, share);
    const int64_t chunks = (share + chunk - 1) / chunk;
    chunk = (share + chunks - 1) / chunks;  // even chunks: one matmul plan for all but maybe the last
    // The 36 transform positions' rows of V and Z, each a multiple of 4 KiB
    // apart as often as not (C * tiles per image is), would share cache sets:
    // the transforms, which touch all 36 per tile, ran at half speed. Padded apart.
    ldv = padded_stride(chunk * g.tiles * C);
    ldz = padded_stride(chunk * g.tiles * K);
  }

  // Runs process(worker, begin, end, step_threads) on images [begin, end) of
  // the batch: a share per worker, each on one thread, or all of it on all.
  template <typename Process>
  void run(int64_t batch, Process&& process) const {
    if (workers == 1) return process(0, 0, batch, threads);
    parallel_shares(workers, batch, [&](int w, int64_t begin, int64_t end) { process(w, begin, end, 1); });
  }
};

template <int M>
void winograd_conv_tiled(const engine::RunContext& run, const WinogradConv& s, const float* x, const float* w,
                         const float* bias, const float* sum, bool relu, bool cache_weights, float* y) {
  constexpr int A2 = (M + 2) * (M + 2);
  const Geometry<M> g(s);
  const int64_t C = s.in_channels, K = s.out_channels;
  const WorkSplit<M> split(run, s, g, [](int) { return true; });
  WinogradScratch scratch(run.device);
  float* v = scratch.get(split.workers * A2 * split.ldv);
  float* z = scratch.get(split.workers * A2 * split.ldz);
  // U from the weight cache (inference), else transformed for this call.
  std::shared_ptr<const DerivedWeights> cached;
  if (cache_weights) {
    const auto floats = static_cast<size_t>(C * K);
    cached = weight_cache_find(fmt::format("winograd{}|{}x{}|{}", M, C, K, s.transposed_weight ? "t" : ""), w,
                               floats * 9 * sizeof(float), floats * A2 * sizeof(float),
                               [&](void* out) { transform_weights<M>(s, split.threads, w, static_cast<float*>(out)); });
  }
  float* u = nullptr;
  if (!cached) {
    u = scratch.get(A2 * C * K);
    transform_weights<M>(s, split.threads, w, u);
  }
  const float* uw = cached ? static_cast<const float*>(cached->data()) : u;
  split.run(s.batch, [&](int64_t worker, int64_t begin, int64_t end, int step_threads) {
    float* wv = v + worker * A2 * split.ldv;
    float* wz = z + worker * A2 * split.ldz;
    for (int64_t n0 = begin; n0 < end; n0 += split.chunk) {
      const int64_t count = std::min(split.chunk, end - n0);
      transform_input<M>(s, g, step_threads, x, n0, count, split.ldv, wv);
      run_winograd_product(*winograd_product_plan(A2, count * g.tiles, C, K, split.ldv, split.ldz, step_threads), wv,
                           uw, wz);
      transform_output<M>(s, g, step_threads, wz, bias, sum, relu, n0, count, split.ldz, y);
    }
  });
}

// The weight gradient dw = Σ over tiles of Gᵀ [(Bᵀ d B)ᵀ . (A dy Aᵀ)] G: the
// forward's products transposed, with its input transform and the transposes
// of its output and weight transforms. With a share of the batch per thread,
// each thread sums into its own dU, and the parts are added before the
// weight transform.
template <int M>
void winograd_weight_grad_tiled(const engine::RunContext& run, const WinogradConv& s, const float* x,
                                const float* dy, float* dw) {
  constexpr int A2 = (M + 2) * (M + 2);
  const Geometry<M> g(s);
  const int64_t C = s.in_channels, K = s.out_channels;
  // A dU per thread costs writing and reading it once more per thread, and
  // each thread's matmul has fewer rows to sum: it pays only while dU is far
  // smaller than the thread's share of V and dZ. Measured on ResNet-18's
  // stages (bench/conv_bench.cc, two threads): per thread and shared steps
  // equal at 64 x 28 x 28 and 128 x 14 x 14 (dU 1/200 and 1/30 of the
  // share); shared 11% faster at 256 x 7 x 7 (1/4) and 28% at 512 x 4 x 4
  // (dU twice the share).
  const int64_t du_floats = A2 * C * K;
  const WorkSplit<M> split(run, s, g, [&](int threads) {
    const int64_t share_floats = A2 * g.tiles * (C + K) * s.batch / threads;
    return 16 * du_floats <= share_floats;
  });
  WinogradScratch scratch(run.device);
  float* v = scratch.get(split.workers * A2 * split.ldv);
  float* z = scratch.get(split.workers * A2 * split.ldz);
  float* du = scratch.get(split.workers * du_floats);
  split.run(s.batch, [&](int64_t worker, int64_t begin, int64_t end, int step_threads) {
    float* wv = v + worker * A2 * split.ldv;
    float* wz = z + worker * A2 * split.ldz;
    float* wdu = du + worker * du_floats;
    if (begin >= end) std::fill(wdu, wdu + du_floats, 0.0f);  // a worker without images
    for (int64_t n0 = begin; n0 < end; n0 += split.chunk) {
      const int64_t count = std::min(split.chunk, end - n0);
      transform_input<M>(s, g, step_threads, x, n0, count, split.ldv, wv);
      transform_output_grad<M>(s, g, step_threads, dy, n0, count, split.ldz, wz);
      run_winograd_product(*winograd_weight_grad_plan(A2, count * g.tiles, C, K, split.ldv, split.ldz,
                                                      memory::data_type::f32, n0 > begin, step_threads),
                           wv, wz, wdu);
    }
  });
  transform_weight_grad<M>(s, split.threads, du, split.workers, dw);
}

int initial_mode() {
  const char* env = std::getenv("KILN_WINOGRAD");
  if (env == nullptr || *env == '\0') return 4;
  std::string value = env;
  if (value == "0" || value == "off" || value == "false") return 0;
  if (value == "2") return 2;
  return 4;
}

std::atomic<int>& mode_flag() {
  static std::atomic<int> mode{initial_mode()};
  return mode;
}

}  // namespace

int winograd_mode() { return mode_flag().load(std::memory_order_relaxed); }

int winograd_set_mode(int mode) {
  if (mode != 0 && mode != 2 && mode != 4)
    throw ValueError(fmt::format("winograd_set_mode: expected 0 (off), 2 or 4, got {}", mode));
  return mode_flag().exchange(mode);
}

int winograd_tile(const WinogradConv& s) {
  const int mode = winograd_mode();
  if (mode == 0 || s.in_channels < kMinChannels || s.out_channels < kMinChannels) return 0;
  if (s.batch <= 0 || s.out_height <= 0 || s.out_width <= 0) return 0;
  auto products = [&](int64_t m) {  // multiply-adds per (input, output) channel pair
    return static_cast<double>((m + 2) * (m + 2) * ((s.out_height + m - 1) / m) * ((s.out_width + m - 1) / m));
  };
  const double direct = 9.0 * static_cast<double>(s.out_height * s.out_width);
  const int tile = mode == 4 && products(4) <= products(2) ? 4 : 2;
  return direct >= kMinSaving * products(tile) ? tile : 0;
}

void winograd_conv(const engine::RunContext& run, const WinogradConv& s, int tile, const float* x, const float* w,
                   const float* bias, const float* sum, std::optional<ActType> act, bool cache_weights, float* y) {
  KILN_ASSERT(!act || *act == ActType::kRelu);
  const bool relu = act.has_value();
  if (tile == 4) return winograd_conv_tiled<4>(run, s, x, w, bias, sum, relu, cache_weights, y);
  KILN_ASSERT(tile == 2);
  winograd_conv_tiled<2>(run, s, x, w, bias, sum, relu, cache_weights, y);
}

void winograd_weight_grad(const engine::RunContext& run, const WinogradConv& s, int tile, const float* x,
                          const float* dy, float* dw) {
  KILN_ASSERT(!s.transposed_weight);
  if (tile == 4) return winograd_weight_grad_tiled<4>(run, s, x, dy, dw);
  KILN_ASSERT(tile == 2);
  winograd_weight_grad_tiled<2>(run, s, x, dy, dw);
}

}  // namespace kiln::cpu
