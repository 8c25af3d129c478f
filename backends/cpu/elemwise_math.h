// Vectorized float32 exp, log, tanh, sigmoid, sqrt and the normal
// distribution's pdf and CDF for the unary kernels.
//
//   VecF v = load_vec(x + i);  v = vec_exp(v);  store_vec(y + i, v);
//
// GCC (without -ffast-math) calls scalar libm for std::exp and friends, so
// these are written with GCC/Clang vector extensions: eight lanes (one AVX
// register; the compiler splits it on narrower targets), no branches. The
// polynomials are Cephes' single-precision ones. Against double-precision libm
// over every 97th float bit pattern the worst errors are 1 ulp (exp, log),
// 1.5 ulp (tanh) and 3 ulp (sigmoid); IEEE special values (NaN, +-inf, 0)
// come out right and small results are subnormal, not flushed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

inline constexpr int kVecWidth = 8;
using VecF = float __attribute__((vector_size(32)));
using VecI = int32_t __attribute__((vector_size(32)));
using VecU = uint32_t __attribute__((vector_size(32)));

inline VecF splat(float v) { return VecF{} + v; }
inline VecF load_vec(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_vec(float* p, VecF v) { std::memcpy(p, &v, sizeof v); }

// 2^n for n in [-126, 127].
inline VecF pow2i(VecI n) { return reinterpret_cast<VecF>((reinterpret_cast<VecU>(n) + 127u) << 23); }

// exp(r) * 2^n for |r| <= ln2 / 2 (a little beyond is fine) and n in
// [-252, 254]: the polynomial and the scaling of vec_exp and vec_exp_diff.
[[gnu::always_inline]] inline VecF exp_reduced(VecF r, VecI n) {
  VecF p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // Scale in two halves so that 2^n neither overflows nor flushes early.
  VecI n1 = n >> 1;
  return p * pow2i(n1) * pow2i(n - n1);
}

// n = round(x / ln2) by the 1.5 * 2^23 trick, as an integer and as a float.
inline VecI round_log2(VecF x, VecF* nf) {
  constexpr float kMagic = 12582912.0f;
  VecF t = x * 1.44269504088896341f + kMagic;
  *nf = t - kMagic;
  return reinterpret_cast<VecI>(reinterpret_cast<VecU>(t) - 0x4B400000u);
}

// ln2 in two parts (Cody and Waite): n * kLn2Hi is exact for |n| < 2^15.
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;

inline VecF vec_exp(VecF x) {
  // Beyond these bounds the result is 0 or inf anyway; clamping keeps n small.
  x = x < -104.0f ? splat(-104.0f) : x;
  x = x > 89.0f ? splat(89.0f) : x;
  VecF nf;
  VecI n = round_log2(x, &nf);
  VecF r = x - nf * kLn2Hi;
  r = r - nf * kLn2Lo;
  return exp_reduced(r, n);
}

// exp(u - h) for h in [0, 100] and |u| <= 8, with h's bits all kept: the
// reduction subtracts n * ln2's head from h exactly (h - n * kLn2Hi is
// below 2 in magnitude, within a factor of two of both terms where h is
// large) before adding u, so the result is as accurate as exp of the exact
// difference. Rounding u - h first would cost h * 2^-24 relative (6e-6 at
// h = 100).
[[gnu::always_inline]] inline VecF vec_exp_diff(VecF u, VecF h) {
  VecF nf;
  VecI n = round_log2(u - h, &nf);
  VecF r = (-h - nf * kLn2Hi) + u;
  r = r - nf * kLn2Lo;
  return exp_reduced(r, n);
}

inline VecF vec_log(VecF x) {
  // Subnormals: scale by 2^23 first.
  VecI tiny = x < 1.17549435e-38f;
  VecF xs = tiny ? x * 8388608.0f : x;
  VecI bits = reinterpret_cast<VecI>(xs);
  VecI e = ((bits >> 23) & 0xff) - 127 + (tiny & -23);
  // x = m * 2^e with m in [sqrt(1/2), sqrt(2)).
  VecF m = reinterpret_cast<VecF>((bits & 0x007fffff) | 0x3f800000);
  VecI big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  e -= big;  // big is -1 where true
  VecF f = m - 1.0f;
  VecF z = f * f;
  VecF p = splat(7.0376836292e-2f);
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  VecF ef = __builtin_convertvector(e, VecF);
  VecF y = p * f * z - 2.12194440e-4f * ef - 0.5f * z;
  VecF result = f + y + 0.693359375f * ef;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  result = x == 0.0f ? splat(-kInf) : result;
  result = x < 0.0f ? splat(std::numeric_limits<float>::quiet_NaN()) : result;
  result = x == kInf ? splat(kInf) : result;
  return x != x ? x : result;
}

inline VecF vec_tanh(VecF x) {
  VecF ax = reinterpret_cast<VecF>(reinterpret_cast<VecI>(x) & 0x7fffffff);
  // |x| < 0.625: odd polynomial; else 1 - 2 / (exp(2|x|) + 1) with x's sign.
  VecF z = x * x;
  VecF p = splat(-5.70498872745e-3f);
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  VecF small = p * z * x + x;
  VecF large = 1.0f - 2.0f / (vec_exp(ax + ax) + 1.0f);
  large = reinterpret_cast<VecF>(reinterpret_cast<VecI>(large) |
                                 (reinterpret_cast<VecI>(x) & static_cast<int32_t>(0x80000000u)));
  return ax < 0.625f ? small : large;
}

// e = exp(-|x|) never overflows: 1 / (1 + e) for x >= 0, e / (1 + e) below.
inline VecF vec_sigmoid(VecF x) {
  VecF e = vec_exp(-reinterpret_cast<VecF>(reinterpret_cast<VecI>(x) & 0x7fffffff));
  VecF s = 1.0f / (1.0f + e);
  return x >= 0.0f ? s : (x != x ? x : e * s);
}

// Phi(x), the standard normal CDF (GELU's gate), and optionally the density
// phi(x) = exp(-x^2/2) / sqrt(2 pi). Phi = erfc(-x / sqrt 2) / 2; its tail
// c = erfc(|x| / sqrt 2) / 2 is computed with relative accuracy from
// erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), P the degree-9 Chebyshev
// fit of Press et al. (fractional error below 1.2e-7 for z >= 0); Phi is c
// below 0 and 1 - c above, so it is accurate relative to its value where it
// is small (within 2e-6 for |x| <= 12, measured against libm in double).
// z^2 = x^2 / 2 is split as hi + lo, hi from |x|'s 12-bit head (an exact
// float) and lo the small rest, so that one vec_exp_diff(P - lo, hi) gives
// the tail, and one more (-lo, hi) the density. NaN gives NaN.
[[gnu::always_inline]] inline VecF vec_normal_cdf(VecF x, VecF* pdf = nullptr) {
  VecF ax = reinterpret_cast<VecF>(reinterpret_cast<VecI>(x) & 0x7fffffff);
  ax = ax > 14.0f ? splat(14.0f) : ax;  // both underflow to 0 well before
  VecF z = ax * 0.707106781186547524f;
  VecF t = 1.0f / (1.0f + 0.5f * z);
  // P in Estrin's form: its dependency chain is 4 multiply-adds deep, not 9.
  VecF t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
  VecF q01 = 1.00002368f * t - 1.26551223f, q23 = 0.09678418f * t + 0.37409196f;
  VecF q45 = 0.27886807f * t - 0.18628806f, q67 = 1.48851587f * t - 1.13520398f;
  VecF q89 = 0.17087277f * t - 0.82215223f;
  VecF p = (q01 + q23 * t2) + (q45 + q67 * t2) * t4 + q89 * t8;
  VecF head = reinterpret_cast<VecF>(reinterpret_cast<VecI>(ax) & static_cast<int32_t>(0xfffff000u));
  VecF tail = ax - head;
  VecF hi = 0.5f * head * head, lo = head * tail + 0.5f * tail * tail;
  if (pdf != nullptr) *pdf = vec_exp_diff(-lo, hi) * 0.398942280401432678f;
  VecF c = 0.5f * t * vec_exp_diff(p - lo, hi);
  VecF phi = x < 0.0f ? c : 1.0f - c;
  return x != x ? x : phi;
}

inline VecF vec_sqrt(VecF x) {
#if defined(__AVX__)
  return reinterpret_cast<VecF>(_mm256_sqrt_ps(reinterpret_cast<__m256>(x)));
#else
  for (int i = 0; i < kVecWidth; ++i) x[i] = std::sqrt(x[i]);
  return x;
#endif
}

// y[i] = f(x[i]) for i < n, eight at a time (the tail through a padded
// vector). y may be x. Two vectors per iteration: the functions above are
// long dependency chains, and two independent ones keep more of the
// core's units busy (about 10% fewer cycles for the normal CDF on Zen 3).
template <typename F>
inline void vec_map(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 2 * kVecWidth <= n; i += 2 * kVecWidth) {
    VecF a = f(load_vec(x + i)), b = f(load_vec(x + i + kVecWidth));
    store_vec(y + i, a);
    store_vec(y + i + kVecWidth, b);
  }
  for (; i + kVecWidth <= n; i += kVecWidth) store_vec(y + i, f(load_vec(x + i)));
  if (i < n) {
    VecF v{};
    size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
    std::memcpy(&v, x + i, bytes);
    v = f(v);
    std::memcpy(y + i, &v, bytes);
  }
}

}  // namespace kiln::cpu
