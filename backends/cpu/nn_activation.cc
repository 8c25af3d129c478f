// CPU kernels: Activation, LeakyReLU and their fused backward ops.
//
// float32 relu, sigmoid, tanh and gelu_tanh use the vectorized polynomials of
// elemwise_math.h; the other forms are loops GCC vectorizes where it can
// (libm calls for exp/erf stay scalar). Every kernel is elementwise and may
// run in place (output == input).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "backends/cpu/elemwise_math.h"
#include "backends/cpu/nn_kernels.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/gelu_tanh.h"
#include "ir/ops/nn.h"

namespace kiln::cpu {
namespace {

// y[i] = f(x[i]) over [0, n), split over threads.
template <typename T, typename F>
void map1(int threads, const T* x, T* y, int64_t n, F f) {
  parallel_for(threads, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}

// dx[i] = f(dy[i], v[i]) over [0, n).
template <typename T, typename F>
void map2(int threads, const T* dy, const T* v, T* dx, int64_t n, F f) {
  parallel_for(threads, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) dx[i] = f(dy[i], v[i]);
  });
}

// float32 through a VecF function, eight lanes at a time.
template <typename VF>
void map_vec(int threads, const float* x, float* y, int64_t n, VF f) {
  parallel_for(threads, n, [&](int64_t b, int64_t e) { vec_map(x + b, y + b, e - b, f); });
}

// dx = f(dy, v) for float32 through a VecF function, eight lanes at a time
// (the tail through the same function on a padded vector).
template <typename VF>
void map2_vec(int threads, const float* dy, const float* v, float* dx, int64_t n, VF f) {
  parallel_for(threads, n, [&](int64_t b, int64_t e) {
    int64_t i = b;
    for (; i + kVecWidth <= e; i += kVecWidth) store_vec(dx + i, f(load_vec(dy + i), load_vec(v + i)));
    if (i < e) {
      float g[kVecWidth] = {}, x[kVecWidth] = {}, r[kVecWidth];
      std::copy(dy + i, dy + e, g);
      std::copy(v + i, v + e, x);
      store_vec(r, f(load_vec(g), load_vec(x)));
      std::copy(r, r + (e - i), dx + i);
    }
  });
}

// ---- Activation

template <typename T>
void activation_forward(int threads, ActType type, const T* x, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
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
      return map1(threads, x, y, n, [](T v) { return v > T(0) ? v : T(0); });
    case ActType::kSigmoid:
      return map1(threads, x, y, n, [](T v) { return T(1) / (T(1) + std::exp(-v)); });
    case ActType::kTanh:
      return map1(threads, x, y, n, [](T v) { return std::tanh(v); });
    case ActType::kSoftrelu:
      // log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow, exact for large |x|.
      return map1(threads, x, y, n, [](T v) { return std::max(v, T(0)) + std::log1p(std::exp(-std::abs(v))); });
    case ActType::kSoftsign:
      return map1(threads, x, y, n, [](T v) { return v / (T(1) + std::abs(v)); });
  }
}

// Derivatives in terms of the output y.
template <typename T>
void activation_backward(int threads, ActType type, const T* dy, const T* y, T* dx, int64_t n) {
  switch (type) {
    case ActType::kRelu:
      return map2(threads, dy, y, dx, n, [](T g, T v) { return v > T(0) ? g : T(0); });
    case ActType::kSigmoid:
      return map2(threads, dy, y, dx, n, [](T g, T v) { return g * v * (T(1) - v); });
    case ActType::kTanh:
      return map2(threads, dy, y, dx, n, [](T g, T v) { return g * (T(1) - v * v); });
    case ActType::kSoftrelu:  // sigmoid(x) = 1 - e^-y
      return map2(threads, dy, y, dx, n, [](T g, T v) { return -g * std::expm1(-v); });
    case ActType::kSoftsign:  // 1 / (1 + |x|)^2 = (1 - |y|)^2
      return map2(threads, dy, y, dx, n, [](T g, T v) {
        T s = T(1) - std::abs(v);
        return g * s * s;
      });
  }
}

void activation_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  ActType type = ctx.attrs.as<ActivationAttrs>().act_type;
  dispatch_float(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    activation_forward<T>(ctx.run.num_threads, type, in[0].ptr<T>(), out[0].ptr<T>(), in[0].size());
  });
}

void activation_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                                std::span<const TensorView> out) {
  ActType type = ctx.attrs.as<ActivationAttrs>().act_type;
  dispatch_float(in[0].dtype, [&](auto tag) {
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
  if constexpr (std::is_same_v<T, float>) {
    if (a.act_type == LeakyType::kGeluTanh) {
      return map_vec(threads, x, y, n, [](VecF v) {
        return gelu_tanh::value<VecF, float>(v, vec_tanh(gelu_tanh::arg<VecF, float>(v)));
      });
    }
  }
  const T slope = static_cast<T>(a.slope);
  const T alpha = static_cast<T>(kSeluAlpha), lambda = static_cast<T>(kSeluLambda);
  switch (a.act_type) {
    case LeakyType::kLeaky:
      return map1(threads, x, y, n, [=](T v) { return v > T(0) ? v : slope * v; });
    case LeakyType::kElu:
      return map1(threads, x, y, n, [=](T v) { return v > T(0) ? v : slope * std::expm1(v); });
    case LeakyType::kSelu:
      return map1(threads, x, y, n, [=](T v) { return lambda * (v > T(0) ? v : alpha * std::expm1(v)); });
    case LeakyType::kGelu:
      return map1(threads, x, y, n, [](T v) { return v * gelu_cdf(v); });
    case LeakyType::kGeluTanh:
      return map1(threads, x, y, n, [](T v) { return gelu_tanh::value(v, std::tanh(gelu_tanh::arg(v))); });
    default:
      KILN_ASSERT(!"LeakyReLU: act_type not admitted by inference");
  }
}

template <typename T>
void leaky_backward(int threads, const LeakyReLUAttrs& a, const T* dy, const T* x, T* dx, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (a.act_type == LeakyType::kGeluTanh) {
      return map2_vec(threads, dy, x, dx, n, [](VecF g, VecF v) {
        return g * gelu_tanh::slope<VecF, float>(v, vec_tanh(gelu_tanh::arg<VecF, float>(v)));
      });
    }
  }
  const T slope = static_cast<T>(a.slope);
  const T alpha = static_cast<T>(kSeluAlpha), lambda = static_cast<T>(kSeluLambda);
  switch (a.act_type) {
    case LeakyType::kLeaky:
      return map2(threads, dy, x, dx, n, [=](T g, T v) { return v > T(0) ? g : slope * g; });
    case LeakyType::kElu:
      return map2(threads, dy, x, dx, n, [=](T g, T v) { return v > T(0) ? g : g * slope * std::exp(v); });
    case LeakyType::kSelu:
      return map2(threads, dy, x, dx, n,
                  [=](T g, T v) { return g * lambda * (v > T(0) ? T(1) : alpha * std::exp(v)); });
    case LeakyType::kGelu:
      return map2(threads, dy, x, dx, n, [](T g, T v) { return g * (gelu_cdf(v) + v * gelu_pdf(v)); });
    case LeakyType::kGeluTanh:
      return map2(threads, dy, x, dx, n,
                  [](T g, T v) { return g * gelu_tanh::slope(v, std::tanh(gelu_tanh::arg(v))); });
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
      T g = gamma[channels == 1 ? 0 : (i / inner) % c_axis];
      y[i] = xp[i] > T(0) ? xp[i] : g * xp[i];
    }
  });
}

void leaky_relu_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<LeakyReLUAttrs>();
  if (a.act_type == LeakyType::kPrelu) {
    return dispatch_float(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      prelu_forward<T>(ctx.run.num_threads, in[0], in[1].ptr<T>(), in[1].size(), out[0].ptr<T>());
    });
  }
  dispatch_float(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    leaky_forward<T>(ctx.run.num_threads, a, in[0].ptr<T>(), out[0].ptr<T>(), in[0].size());
  });
}

void leaky_relu_backward_kernel(const KernelContext& ctx, std::span<const TensorView> in,
                                std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<LeakyReLUAttrs>();
  dispatch_float(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    leaky_backward<T>(ctx.run.num_threads, a, in[0].ptr<T>(), in[1].ptr<T>(), out[0].ptr<T>(), in[0].size());
  });
}

}  // namespace

void activation_inplace(int threads, ActType act, const TensorView& y) {
  dispatch_float(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    activation_forward<T>(threads, act, y.ptr<T>(), y.ptr<T>(), y.size());
  });
}

void register_nn_activation_kernels() {
  register_kernel(OpId::kActivation, DeviceKind::kCPU, activation_kernel);
  register_kernel(OpId::kActivationBackward, DeviceKind::kCPU, activation_backward_kernel);
  register_kernel(OpId::kLeakyReLU, DeviceKind::kCPU, leaky_relu_kernel);
  register_kernel(OpId::kLeakyReLUBackward, DeviceKind::kCPU, leaky_relu_backward_kernel);
}

}  // namespace kiln::cpu
