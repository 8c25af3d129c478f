#include "backends/cpu/matrix_copy.h"

#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backends/cpu/parallel.h"
#include "ir/error.h"

namespace kiln::cpu {

void StridedLayout::push(int64_t dim, int64_t dst_stride, int64_t src_stride) {
  KILN_ASSERT(ndim < kMaxAxes);
  dims[ndim] = dim;
  dst[ndim] = dst_stride;
  src[ndim] = src_stride;
  ++ndim;
}

int64_t StridedLayout::size() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

void parallel_memcpy(int num_threads, void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  parallel_for(
      num_threads, static_cast<int64_t>(bytes), [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, e - b); },
      kDefaultGrain * 8);
}

namespace {

// Drops length-1 axes and merges neighbours that are contiguous in both the
// destination and the source, so most copies end as a few long runs.
StridedLayout simplify(const StridedLayout& l) {
  StridedLayout o;
  for (int i = 0; i < l.ndim; ++i) {
    if (l.dims[i] == 1) continue;
    int j = o.ndim - 1;
    if (j >= 0 && o.dst[j] == l.dst[i] * l.dims[i] && o.src[j] == l.src[i] * l.dims[i]) {
      o.dims[j] *= l.dims[i];
      o.dst[j] = l.dst[i];
      o.src[j] = l.src[i];
    } else {
      o.push(l.dims[i], l.dst[i], l.src[i]);
    }
  }
  return o;
}

// Walks the multi-indices of the first `m` axes of a layout in row-major order,
// tracking the element offsets in dst and src.
struct Odometer {
  const StridedLayout& l;
  int m;
  std::array<int64_t, StridedLayout::kMaxAxes> idx{};
  int64_t dst = 0, src = 0;

  Odometer(const StridedLayout& layout, int axes, int64_t linear) : l(layout), m(axes) {
    for (int k = m - 1; k >= 0; --k) {
      idx[k] = linear % l.dims[k];
      linear /= l.dims[k];
      dst += idx[k] * l.dst[k];
      src += idx[k] * l.src[k];
    }
  }
  void next() {
    for (int k = m - 1; k >= 0; --k) {
      dst += l.dst[k];
      src += l.src[k];
      if (++idx[k] < l.dims[k]) return;
      dst -= l.dims[k] * l.dst[k];
      src -= l.dims[k] * l.src[k];
      idx[k] = 0;
    }
  }
};

template <typename U>
void copy_run(U* d, const U* s, int64_t n, int64_t ds, int64_t ss) {
  if (ds == 1 && ss == 1) {
    std::memcpy(d, s, static_cast<size_t>(n) * sizeof(U));
  } else if (ds == 1 && ss == 0) {
    std::fill(d, d + n, *s);
  } else {
    for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
  }
}

// Runs along the last axis; parallel over elements, so a single long run is
// split too.
template <typename U>
void copy_rows(int num_threads, U* dst, const U* src, const StridedLayout& l) {
  int last = l.ndim - 1;
  int64_t len = l.dims[last], ds = l.dst[last], ss = l.src[last];
  parallel_for(num_threads, l.size(), [&](int64_t b, int64_t e) {
    Odometer od(l, last, b / len);
    int64_t col = b % len;
    for (int64_t pos = b; pos < e; od.next(), col = 0) {
      int64_t n = std::min(len - col, e - pos);
      copy_run(dst + od.dst + col * ds, src + od.src + col * ss, n, ds, ss);
      pos += n;
    }
  });
}

#if defined(__AVX2__)
// Rows r of `s` (stride ss) become columns of `d` (stride ds): an 8 x 8 float transpose.
inline void transpose8x8(const float* s, int64_t ss, float* d, int64_t ds) {
  __m256 r[8], t[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(s + k * ss);
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    r[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
    r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(d + k * ds, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
    _mm256_storeu_ps(d + (k + 4) * ds, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
  }
}
#endif

// Tiles span 128 bytes along each contiguous side, so every cache line
// touched is used whole; the tile goes through a small buffer because rows of
// a power-of-two-sized matrix all map to the same cache sets.
template <typename U>
constexpr int64_t kTile = 128 / sizeof(U);

// d[i * da + j] = buf[j * bs + i] for i < ni, j < nj, in 8 x 8 blocks (in
// registers for 4-byte units with AVX2).
template <typename U>
void transpose_from_buffer(const U* buf, int64_t bs, U* d, int64_t da, int64_t ni, int64_t nj) {
  for (int64_t i0 = 0; i0 < ni; i0 += 8) {
    for (int64_t j0 = 0; j0 < nj; j0 += 8) {
#if defined(__AVX2__)
      if constexpr (sizeof(U) == 4) {
        if (i0 + 8 <= ni && j0 + 8 <= nj) {
          transpose8x8(reinterpret_cast<const float*>(buf + j0 * bs + i0), bs,
                       reinterpret_cast<float*>(d + i0 * da + j0), da);
          continue;
        }
      }
#endif
      for (int64_t i = i0; i < std::min(ni, i0 + 8); ++i)
        for (int64_t j = j0; j < std::min(nj, j0 + 8); ++j) d[i * da + j] = buf[j * bs + i];
    }
  }
}

// A batch of 2-D transposes: axis `a` is contiguous in the source, the last
// axis contiguous in the destination.
template <typename U>
void copy_tiled(int num_threads, U* dst, const U* src, const StridedLayout& l, int a) {
  constexpr int64_t T = kTile<U>;
  int last = l.ndim - 1;
  StridedLayout outer;
  for (int k = 0; k < last; ++k)
    if (k != a) outer.push(l.dims[k], l.dst[k], l.src[k]);
  int64_t na = l.dims[a], nb = l.dims[last], da = l.dst[a], sb = l.src[last];
  int64_t tiles_a = (na + T - 1) / T, tiles_b = (nb + T - 1) / T;
  int64_t items = outer.size() * tiles_a * tiles_b;
  parallel_for(
      num_threads, items,
      [&](int64_t begin, int64_t end) {
        U buf[T][T];  // buf[j][i]: source row j of the tile
        for (int64_t w = begin; w < end; ++w) {
          int64_t tb = w % tiles_b, ta = (w / tiles_b) % tiles_a;
          Odometer od(outer, outer.ndim, w / (tiles_a * tiles_b));
          int64_t i0 = ta * T, ni = std::min(na - i0, T);
          int64_t j0 = tb * T, nj = std::min(nb - j0, T);
          const U* s = src + od.src + i0 + j0 * sb;
          U* d = dst + od.dst + i0 * da + j0;
          for (int64_t j = 0; j < nj; ++j) std::memcpy(buf[j], s + j * sb, static_cast<size_t>(ni) * sizeof(U));
          transpose_from_buffer(&buf[0][0], T, d, da, ni, nj);
        }
      },
      std::max<int64_t>(1, kDefaultGrain / (T * T)));
}

template <typename U>
void copy_as(int num_threads, void* dst, const void* src, const StridedLayout& l) {
  auto* d = static_cast<U*>(dst);
  const auto* s = static_cast<const U*>(src);
  if (l.ndim == 0) {
    *d = *s;
    return;
  }
  int last = l.ndim - 1;
  if (l.dst[last] == 1 && l.dims[last] >= 8 && l.src[last] != 0 && l.src[last] != 1) {
    for (int a = 0; a < last; ++a)
      if (l.src[a] == 1 && l.dims[a] >= 8) return copy_tiled(num_threads, d, s, l, a);
  }
  copy_rows(num_threads, d, s, l);
}

}  // namespace

void strided_copy(int num_threads, size_t elem_size, void* dst, const void* src, StridedLayout layout) {
  if (layout.size() == 0) return;
  StridedLayout l = simplify(layout);
  dispatch_unit(elem_size, [&](auto unit) { copy_as<decltype(unit)>(num_threads, dst, src, l); });
}

}  // namespace kiln::cpu
