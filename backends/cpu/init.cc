// CPU kernels of the init family: constant fills, ranges, random samples.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <type_traits>

#if KILN_HAVE_MVEC && defined(__AVX2__)
#include <immintrin.h>
// glibc's libmvec: log, sin and cos of four doubles (AVX2 variants; at most
// 4 ulp from the scalar functions).
extern "C" __m256d _ZGVdN4v_log(__m256d);
extern "C" __m256d _ZGVdN4v_sin(__m256d);
extern "C" __m256d _ZGVdN4v_cos(__m256d);
#endif

#include "backends/counter_rng.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/init.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

using rng::random_bits;
using rng::unit_uniform;

// v in T; integers saturate at T's range and take NaN as 0 (a cast out of
// range has no defined result; `full` refuses such values at inference).
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Half>) return float_to_half(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, BFloat16>) return float_to_bf16(static_cast<float>(v));
  else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const double end = std::ldexp(1.0, std::numeric_limits<T>::digits);
    if (!(v == v)) return T(0);
    if (v >= end) return std::numeric_limits<T>::max();
    if (v < (std::is_signed_v<T> ? -end : 0.0)) return std::numeric_limits<T>::min();
    return static_cast<T>(v);
  } else return static_cast<T>(v);
}

// Fills out[i] = value_at(i) for every element, in parallel.
template <typename ValueAt>
void fill_with(const KernelContext& ctx, const TensorView& out, ValueAt value_at) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = out.ptr<T>();
    cpu::parallel_for(ctx.run.num_threads, out.size(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = from_double<T>(value_at(i));
    });
  });
}

void fill_constant(const KernelContext& ctx, const TensorView& out, double v) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = out.ptr<T>();
    const T value = from_double<T>(v);
    cpu::parallel_for(ctx.run.num_threads, out.size(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = value;
    });
  });
}

void zeros_kernel(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  fill_constant(ctx, out[0], 0.0);
}

void ones_kernel(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  fill_constant(ctx, out[0], 1.0);
}

void full_kernel(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  fill_constant(ctx, out[0], ctx.attrs.as<FullAttrs>().value);
}

void arange_kernel(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<ArangeAttrs>();
  double start = a.stop ? a.start : 0;
  int64_t repeat = a.repeat;
  fill_with(ctx, out[0], [&](int64_t i) { return start + static_cast<double>(i / repeat) * a.step; });
}

void uniform_kernel(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<RandomAttrs>();
  auto seed = static_cast<uint64_t>(a.seed);
  auto offset = static_cast<uint64_t>(a.offset);
  double scale = a.b - a.a;
  fill_with(ctx, out[0], [&](int64_t i) { return a.a + scale * unit_uniform(random_bits(seed, offset + i)); });
}

// Box–Muller on pairs: positions 2k and 2k+1 share one pair of uniforms
// (u1, u2); r = sqrt(-2 log(1 - u1)), theta = 2 pi u2, and 2k takes
// r cos(theta), 2k+1 r sin(theta). Pairs are computed four at a time, in
// groups aligned on the pair index (pairs 4g .. 4g+3), with glibc's vector
// log/sin/cos (libmvec) on AVX2: every pair is always computed the same way
// whatever range a thread's chunk covers, so the values do not depend on the
// thread count. A chunk that starts or ends inside a group computes the
// whole group and stores its part.
struct BoxMuller {
  uint64_t seed;
  double loc, scale;

  // Pairs 4g .. 4g+3: r, cos(theta), sin(theta).
  void group(uint64_t g, double* r, double* c, double* s) const {
    alignas(32) double u1[4], u2[4];
    for (int k = 0; k < 4; ++k) {
      const uint64_t pair = 4 * g + static_cast<uint64_t>(k);
      u1[k] = 1.0 - unit_uniform(random_bits(seed, 2 * pair));  // (0, 1]: log is finite
      u2[k] = unit_uniform(random_bits(seed, 2 * pair + 1));
    }
#if KILN_HAVE_MVEC && defined(__AVX2__)
    const __m256d logs = _ZGVdN4v_log(_mm256_load_pd(u1));
    _mm256_storeu_pd(r, _mm256_sqrt_pd(_mm256_mul_pd(_mm256_set1_pd(-2.0), logs)));
    const __m256d theta = _mm256_mul_pd(_mm256_set1_pd(2.0 * std::numbers::pi), _mm256_load_pd(u2));
    _mm256_storeu_pd(c, _ZGVdN4v_cos(theta));
    _mm256_storeu_pd(s, _ZGVdN4v_sin(theta));
#else
    for (int k = 0; k < 4; ++k) {
      r[k] = std::sqrt(-2.0 * std::log(u1[k]));
      const double theta = 2.0 * std::numbers::pi * u2[k];
      c[k] = std::cos(theta);
      s[k] = std::sin(theta);
    }
#endif
  }
};

void normal_kernel(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<RandomAttrs>();
  const BoxMuller bm{static_cast<uint64_t>(a.seed), a.a, a.b};
  const auto offset = static_cast<uint64_t>(a.offset);  // even, see nd::random
  dispatch_dtype(out[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    T* base = out[0].ptr<T>();
    auto put = [&](uint64_t pos, double v) { base[pos - offset] = from_double<T>(v); };
    cpu::parallel_for(ctx.run.num_threads, out[0].size(), [&](int64_t b, int64_t e) {
      const uint64_t lo = offset + static_cast<uint64_t>(b), hi = offset + static_cast<uint64_t>(e);
      for (uint64_t g = lo / 8; 8 * g < hi; ++g) {  // group g: positions 8g .. 8g+7
        double r[4], c[4], s[4];
        bm.group(g, r, c, s);
        const uint64_t first = 8 * g;
        if (first >= lo && first + 8 <= hi) {
          for (uint64_t k = 0; k < 4; ++k) {
            put(first + 2 * k, bm.loc + bm.scale * r[k] * c[k]);
            put(first + 2 * k + 1, bm.loc + bm.scale * r[k] * s[k]);
          }
          continue;
        }
        for (uint64_t pos = std::max(first, lo); pos < std::min(first + 8, hi); ++pos) {
          const uint64_t k = (pos - first) / 2;
          put(pos, bm.loc + bm.scale * r[k] * ((pos & 1) ? s[k] : c[k]));
        }
      }
    });
  });
}

}  // namespace

void register_cpu_init_kernels() {
  register_kernel(OpId::kZeros, DeviceKind::kCPU, zeros_kernel, HalfSupport::kAny);
  register_kernel(OpId::kOnes, DeviceKind::kCPU, ones_kernel, HalfSupport::kAny);
  register_kernel(OpId::kFull, DeviceKind::kCPU, full_kernel, HalfSupport::kAny);
  register_kernel(OpId::kArange, DeviceKind::kCPU, arange_kernel, HalfSupport::kAny);
  register_kernel(OpId::kRandomUniform, DeviceKind::kCPU, uniform_kernel, HalfSupport::kAny);
  register_kernel(OpId::kRandomNormal, DeviceKind::kCPU, normal_kernel, HalfSupport::kAny);
}

}  // namespace kiln
