// CPU kernels of the init family: constant fills, ranges, random samples.
#include <cmath>
#include <numbers>

#include "backends/cpu/parallel.h"
#include "ir/ops/init.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Half>) return float_to_half(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, BFloat16>) return float_to_bf16(static_cast<float>(v));
  else return static_cast<T>(v);
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

// Counter-based generator: the value at stream position i is a hash of
// (seed, i), so samples do not depend on thread count or scheduling.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

inline uint64_t random_bits(uint64_t seed, uint64_t position) {
  return mix64(seed ^ mix64(position + 0x9e3779b97f4a7c15ull));
}

// Uniform in [0, 1) with 53 random bits.
inline double unit_uniform(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

void uniform_kernel(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<RandomAttrs>();
  auto seed = static_cast<uint64_t>(a.seed);
  auto offset = static_cast<uint64_t>(a.offset);
  double scale = a.b - a.a;
  fill_with(ctx, out[0], [&](int64_t i) { return a.a + scale * unit_uniform(random_bits(seed, offset + i)); });
}

// Box–Muller on pairs: positions 2k and 2k+1 share one pair of uniforms,
// 2k takes the cosine and 2k+1 the sine. Each pair is computed once (its
// log, square root and sincos serve both positions); a chunk that starts or
// ends inside a pair computes that position alone, with the same formula,
// so the values do not depend on how the work is split.
struct BoxMuller {
  uint64_t seed;
  double loc, scale;
  // r and theta of the pair holding stream position `pos`.
  void polar(uint64_t pos, double& r, double& theta) const {
    const uint64_t pair = pos / 2;
    const double u1 = 1.0 - unit_uniform(random_bits(seed, 2 * pair));  // (0, 1]: log is finite
    const double u2 = unit_uniform(random_bits(seed, 2 * pair + 1));
    r = std::sqrt(-2.0 * std::log(u1));
    theta = 2.0 * std::numbers::pi * u2;
  }
  double at(uint64_t pos) const {
    double r, theta;
    polar(pos, r, theta);
    return loc + scale * r * ((pos & 1) ? std::sin(theta) : std::cos(theta));
  }
};

void normal_kernel(const KernelContext& ctx, std::span<const TensorView>, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<RandomAttrs>();
  const BoxMuller bm{static_cast<uint64_t>(a.seed), a.a, a.b};
  const auto offset = static_cast<uint64_t>(a.offset);  // even, see nd::random
  dispatch_dtype(out[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = out[0].ptr<T>();
    cpu::parallel_for(ctx.run.num_threads, out[0].size(), [&](int64_t b, int64_t e) {
      int64_t i = b;
      if (i < e && ((offset + static_cast<uint64_t>(i)) & 1)) {
        p[i] = from_double<T>(bm.at(offset + static_cast<uint64_t>(i)));
        ++i;
      }
      for (; i + 1 < e; i += 2) {
        double r, theta;
        bm.polar(offset + static_cast<uint64_t>(i), r, theta);
        p[i] = from_double<T>(bm.loc + bm.scale * r * std::cos(theta));
        p[i + 1] = from_double<T>(bm.loc + bm.scale * r * std::sin(theta));
      }
      if (i < e) p[i] = from_double<T>(bm.at(offset + static_cast<uint64_t>(i)));
    });
  });
}

}  // namespace

void register_cpu_init_kernels() {
  register_kernel(OpId::kZeros, DeviceKind::kCPU, zeros_kernel);
  register_kernel(OpId::kOnes, DeviceKind::kCPU, ones_kernel);
  register_kernel(OpId::kFull, DeviceKind::kCPU, full_kernel);
  register_kernel(OpId::kArange, DeviceKind::kCPU, arange_kernel);
  register_kernel(OpId::kRandomUniform, DeviceKind::kCPU, uniform_kernel);
  register_kernel(OpId::kRandomNormal, DeviceKind::kCPU, normal_kernel);
}

}  // namespace kiln
