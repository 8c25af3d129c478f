// GELU's tanh approximation (Hendrycks and Gimpel), LeakyReLU's act_type
// "gelu_tanh": one definition for every backend's kernels.
//
//   T t = std::tanh(gelu_tanh::arg(x));    // each backend's own tanh
//   y  = gelu_tanh::value(x, t);           // 0.5 x (1 + t)
//   dx = dy * gelu_tanh::slope(x, t);      // f'(x)
//
// with t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3). The functions are
// constexpr so that CUDA device code may call them (nvcc's
// --expt-relaxed-constexpr, as backends/counter_rng.h). The second
// derivative, which only the gradient graph needs, is written in ordinary ops
// in ir/ops/nn_grad.cc from the same constants.
#pragma once

namespace kiln::gelu_tanh {

inline constexpr double kSqrt2OverPi = 0.79788456080286535587989211986876;
inline constexpr double kCubic = 0.044715;

template <typename T>
constexpr T arg(T x) {
  return T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x);
}

template <typename T>
constexpr T value(T x, T t) {
  return T(0.5) * x * (T(1) + t);
}

// f'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) u'(x), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <typename T>
constexpr T slope(T x, T t) {
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * x * x);
}

}  // namespace kiln::gelu_tanh
