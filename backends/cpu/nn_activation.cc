// CPU kernels: Activation, LeakyReLU and their fused backward ops.
//
// float32 relu, sigmoid, tanh, gelu and gelu_tanh use the vectorized polynomials of
// elemwise_math.h; the other forms are loops GCC vectorizes where it can
// (libm calls for exp/erf stay scalar). Every kernel is elementwise and may
// run in place (output == input).
//
// GELU (both forms) on float16/bfloat16 arrays of at least
// onednn::kEltwiseMinElements runs oneDNN's eltwise primitives instead
// (onednn_eltwise.h): sixteen lanes where the CPU has AVX-512, 16-bit data
// read and written directly. Their float32 results agree with the loops below
// within 1e-6 absolute, but not relative to the value in the negative tail
// (x below about -2, where the value is below 0.05; they reach 0 near x = -6,
// as PyTorch's do): float32 and float64 keep the loops below, accurate there.
//
// float16 and bfloat16 arrays are taken as they are: elements are loaded into
// float32, computed exactly as the float32 kernel does, and rounded once on
// store (the vectorized forms convert blocks of kStage elements at a time).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/elemwise_math.h"
#include "backends/cpu/nn_kernels.h"
#include "backends/cpu/onednn_eltwise.h"
#include "backends/cpu/parallel.h"
#include "ir/amp.h"
#include "ir/ops/gelu_tanh.h"
#include "ir/ops/nn.h"

namespace kiln::cpu {
namespace {

// y[i] = f(x[i]) over [0, n), split over threads; f sees compute_t<T>.
template <typename T, typename F>
void map1(int threads, const T* x, T* y, int64_t n, F f) {
  parallel_for(threads, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = store<T>(f(load(x[i])));
  });
}

// dx[i] = f(dy[i], v[i]) over [0, n); f sees compute_t<T>.
template <typename T, typename F>
void map2(int threads, const T* dy, const T* v, T* dx, int64_t n, F f) {
  parallel_for(threads, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) dx[i] = store<T>(f(load(dy[i]), load(v[i])));
  });
}

// 16-bit elements converted per block of this many, on the stack.
constexpr int64_t kStage = 512;

// float32, float16 or bfloat16 through a VecF function, eight lanes at a time.
template <typename T, typename VF>
void map_vec(int threads, const T* x, T* y, int64_t n, VF f) {
  parallel_for(threads, n, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float>) {
      vec_map(x + b, y + b, e - b, f);
    } else {
      float buf[kStage];
      for (int64_t s = b; s < e; s += kStage) {
        const int64_t len = std::min(kStage, e - s);
        for (int64_t i = 0; i < len; ++i) buf[i] = load(x[s + i]);
        vec_map(buf, buf, len, f);
        for (int64_t i = 0; i < len; ++i) y[s + i] = store<T>(buf[i]);
      }
    }
  });
}

// dx = f(dy, v) for float32 through a VecF function, eight lanes at a time
// (the tail through the same function on a padded vector); two vectors per
// iteration, as vec_map.
template <typename VF>
void map2_vec_span(const float* dy, const float* v, float* dx, int64_t n, VF f) {
  int64_t i = 0;
  for (; i + 2 * kVecWidth <= n; i += 2 * kVecWidth) {
    VecF a = f(load_vec(dy + i), load_vec(v + i));
    VecF b = f(load_vec(dy + i + kVecWidth), load_vec(v + i + kVecWidth));
    store_vec(dx + i, a);
    store_vec(dx + i + kVecWidth, b);
  }
  for (; i + kVecWidth <= n; i += kVecWidth) store_vec(dx + i, f(load_vec(dy + i), load_vec(v + i)));
  if (i < n) {
    float g[kVecWidth] = {}, x[kVecWidth] = {}, r[kVecWidth];
    std::copy(dy + i, dy + n, g);
    std::copy(v + i, v + n, x);
    store_vec(r, f(load_vec(g), load_vec(x)));
    std::copy(r, r + (n - i), dx + i);
  }
}

// map2_vec_span over [0, n) split over threads; 16-bit arrays through float32 blocks.
template <typename T, typename VF>
void map2_vec(int threads, const T* dy, const T* v, T* dx, int64_t n, VF f) {
  parallel_for(threads, n, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float>) {
      map2_vec_span(dy + b, v + b, dx + b, e - b, f);
    } else {
      float g[kStage], x[kStage];
      for (int64_t s = b; s < e; s += kStage) {
        const int64_t len = std::min(kStage, e - s);
        for (int64_t i = 0; i < len; ++i) {
          g[i] = load(dy[s + i]);
          x[i] = load(v[s + i]);
        }
        map2_vec_span(g, x, g, len, f);
        for (int64_t i = 0; i < len; ++i) dx[s + i] = store<T>(g[i]);
      }
    }
  });
}

// ---- Activation

template <typename T>
void activation_forward(int threads, ActType type, const T* x, T* y, int64_t n) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<C, float>) {
    switch (type) {
      case ActType::kRelu:
        return map_vec(threads, x, y, n, [](VecF v) { return v > 0.0f ? v : splat(0.0f); });
      case ActType::kSigmoid:
        return map_vec(threads, x, y, n, [](VecF v) { return vec_sigmoid(v); });
      case ActType::kTanh:
        return map_vec(threads, x, y, n, [](VecF v) { return vec_tanh(v); });
      default:
        break;
    }
  }
  switch (type) {
    case ActType::kRelu:
      return map1(threads, x, y, n, [](C v) { return v > C(0) ? v : C(0); });
    case ActType::kSigmoid:
      return map1(threads, x, y, n, [](C v) { return C(1) / (C(1) + std::exp(-v)); });
    case ActType::kTanh:
      return map1(threads, x, y, n, [](C v) { return std::tanh(v); });
    case ActType::kSoftrelu:
      // log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow, exact for large |x|.
      return map1(threads, x, y, n, [](C v) { return std::max(v, C(0)) + std::log1p(std::exp(-std::abs(v))); });
    case ActType::kSoftsign:
      return map1(threads, x, y, n, [](C v) { return v / (C(1) + std::abs(v)); });
  }
}

// Derivatives in terms of the output y.
template <typename T>
void activation_backward(int threads, ActType type, const T* dy, const T* y, T* dx, int64_t n) {
  using C = compute_t<T>;
  switch (type) {
    case ActType::kRelu:
      return map2(threads, dy, y, dx, n, [](C g, C v) { return v > C(0) ? g : C(0); });
    case ActType::kSigmoid:
      return map2(threads, dy, y, dx, n, [](C g, C v) { return g * v * (C(1) - v); });
    case ActType::kTanh:
      return map2(threads, dy, y, dx, n, [](C g, C v) { return g * (C(1) - v * v); });
    case ActType::kSoftrelu:  // sigmoid(x) = 1 - e^-y
      return map2(threads, dy, y, dx, n, [](C g, C v) { return -g * std::expm1(-v); });
    case ActType::kSoftsign:  // 1 / (1 + |x|)^2 = (1 - |y|)^2
      return map2(threads, dy, y, dx, n, [](C g, C v) {
        C s = C(1) - std::abs(v);
        return g * s * s;
      });
  }
}

void activation_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  ActType type = ctx.attrs.as<ActivationAttrs>().act_type;
  dispatch_floating(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    activation_forward<T>(ctx.run.num_threads, type, in[0].ptr<T>(), out[0].ptr<T>(), in[0].size());
  });
}

void activation_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                                std::span<const TensorView> out) {
  ActType type = ctx.attrs.as<ActivationAttrs>().act_type;
  dispatch_floating(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    activation_backward<T>(ctx.run.num_threads, type, in[0].ptr<T>(), in[1].ptr<T>(), out[0].ptr<T>(), in[0].size());
  });
}

// ---- LeakyReLU

// The normal CDF through erfc: 1 + erf(x) would cancel for negative x.
template <typename T>
T gelu_cdf(T x) {
  return T(0.5) * std::erfc(-x * T(std::numbers::sqrt2 / 2));
}

template <typename T>
T gelu_pdf(T x) {
  return std::exp(T(-0.5) * x * x) * T(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
}

template <typename T>
void leaky_forward(int threads, const LeakyReLUAttrs& a, const T* x, T* y, int64_t n) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<C, float>) {
    if (a.act_type == LeakyType::kGeluTanh) {
      return map_vec(threads, x, y, n, [](VecF v) {
        return gelu_tanh::value<VecF, float>(v, vec_tanh(gelu_tanh::arg<VecF, float>(v)));
      });
    }
    if (a.act_type == LeakyType::kGelu) return map_vec(threads, x, y, n, [](VecF v) { return v * vec_normal_cdf(v); });
  }
  const C slope = static_cast<C>(a.slope);
  const C alpha = static_cast<C>(kSeluAlpha), lambda = static_cast<C>(kSeluLambda);
  switch (a.act_type) {
    case LeakyType::kLeaky:
      return map1(threads, x, y, n, [=](C v) { return v > C(0) ? v : slope * v; });
    case LeakyType::kElu:
      return map1(threads, x, y, n, [=](C v) { return v > C(0) ? v : slope * std::expm1(v); });
    case LeakyType::kSelu:
      return map1(threads, x, y, n, [=](C v) { return lambda * (v > C(0) ? v : alpha * std::expm1(v)); });
    case LeakyType::kGelu:
      return map1(threads, x, y, n, [](C v) { return v * gelu_cdf(v); });
    case LeakyType::kGeluTanh:
      return map1(threads, x, y, n, [](C v) { return gelu_tanh::value(v, std::tanh(gelu_tanh::arg(v))); });
    default:
      KILN_ASSERT(!"LeakyReLU: act_type not admitted by inference");
  }
}

template <typename T>
void leaky_backward(int threads, const LeakyReLUAttrs& a, const T* dy, const T* x, T* dx, int64_t n) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<C, float>) {
    if (a.act_type == LeakyType::kGeluTanh) {
      return map2_vec(threads, dy, x, dx, n, [](VecF g, VecF v) {
        return g * gelu_tanh::slope<VecF, float>(v, vec_tanh(gelu_tanh::arg<VecF, float>(v)));
      });
    }
    if (a.act_type == LeakyType::kGelu) {
      return map2_vec(threads, dy, x, dx, n,
                      [](VecF g, VecF v) {
                        VecF pdf;
                        VecF cdf = vec_normal_cdf(v, &pdf);
                        return g * (cdf + v * pdf);
                      });
    }
  }
  const C slope = static_cast<C>(a.slope);
  const C alpha = static_cast<C>(kSeluAlpha), lambda = static_cast<C>(kSeluLambda);
  switch (a.act_type) {
    case LeakyType::kLeaky:
      return map2(threads, dy, x, dx, n, [=](C g, C v) { return v > C(0) ? g : slope * g; });
    case LeakyType::kElu:
      return map2(threads, dy, x, dx, n, [=](C g, C v) { return v > C(0) ? g : g * slope * std::exp(v); });
    case LeakyType::kSelu:
      return map2(threads, dy, x, dx, n,
                  [=](C g, C v) { return g * lambda * (v > C(0) ? C(1) : alpha * std::exp(v)); });
    case LeakyType::kGelu:
      return map2(threads, dy, x, dx, n, [](C g, C v) { return g * (gelu_cdf(v) + v * gelu_pdf(v)); });
    case LeakyType::kGeluTanh:
      return map2(threads, dy, x, dx, n,
                  [](C g, C v) { return g * gelu_tanh::slope(v, std::tanh(gelu_tanh::arg(v))); });
    default:
      KILN_ASSERT(!"LeakyReLU: act_type not admitted by inference");
  }
}

// prelu: x [outer, C, inner] (C = axis 1, or 1 for a single shared slope), one gamma per channel.
template <typename T>
void prelu_forward(int threads, const TensorView& x, const T* gamma, int64_t channels, T* y) {
  const T* xp = x.ptr<T>();
  int64_t c_axis = x.shape.ndim() >= 2 ? x.shape[1] : 1;
  int64_t inner = 1;
  for (int i = 2; i < x.shape.ndim(); ++i) inner *= x.shape[i];
  parallel_for(threads, x.size(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto g = load(gamma[channels == 1 ? 0 : (i / inner) % c_axis]);
      const auto v = load(xp[i]);
      y[i] = store<T>(v > 0 ? v : g * v);
    }
  });
}

// oneDNN's algorithm for the GELU forms; nullopt for the others.
std::optional<dnnl::algorithm> gelu_algorithm(LeakyType t) {
  if (t == LeakyType::kGelu) return dnnl::algorithm::eltwise_gelu_erf;
  if (t == LeakyType::kGeluTanh) return dnnl::algorithm::eltwise_gelu_tanh;
  return std::nullopt;
}

void leaky_relu_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<LeakyReLUAttrs>();
  if (auto alg = gelu_algorithm(a.act_type);
      alg && is_16bit_float(in[0].dtype) && onednn::eltwise_forward(ctx.run, *alg, in[0].dtype, in[0].data, out[0].data, in[0].size()))
    return;
  if (a.act_type == LeakyType::kPrelu) {
    return dispatch_floating(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      prelu_forward<T>(ctx.run.num_threads, in[0], in[1].ptr<T>(), in[1].size(), out[0].ptr<T>());
    });
  }
  dispatch_floating(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    leaky_forward<T>(ctx.run.num_threads, a, in[0].ptr<T>(), out[0].ptr<T>(), in[0].size());
  });
}

void leaky_relu_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                                std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<LeakyReLUAttrs>();
  if (auto alg = gelu_algorithm(a.act_type);
      alg && is_16bit_float(in[0].dtype) && onednn::eltwise_backward(ctx.run, *alg, in[0].dtype, in[0].data, in[1].data, out[0].data, in[0].size()))
    return;
  dispatch_floating(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    leaky_backward<T>(ctx.run.num_threads, a, in[0].ptr<T>(), in[1].ptr<T>(), out[0].ptr<T>(), in[0].size());
  });
}

}  // namespace

void activation_inplace(int threads, ActType act, const TensorView& y) {
  dispatch_floating(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    activation_forward<T>(threads, act, y.ptr<T>(), y.ptr<T>(), y.size());
  });
}

void register_nn_activation_kernels() {
  constexpr auto kAny = HalfSupport::kAny;
  register_kernel(OpId::kActivation, DeviceKind::kCPU, activation_kernel, kAny);
  register_kernel(OpId::kActivationBackward, DeviceKind::kCPU, activation_backward_kernel, kAny);
  register_kernel(OpId::kLeakyReLU, DeviceKind::kCPU, leaky_relu_kernel, kAny);
  register_kernel(OpId::kLeakyReLUBackward, DeviceKind::kCPU, leaky_relu_backward_kernel, kAny);
}

}  // namespace kiln::cpu
