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

// T is a number or a vector of S lanes (the CPU's VecF with S = float).
template <typename T, typename S = T>
constexpr T arg(T x) {
  return S(kSqrt2OverPi) * (x + S(kCubic) * x * x * x);
}

template <typename T, typename S = T>
constexpr T value(T x, T t) {
  return S(0.5) * x * (S(1) + t);
}

// f'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) u'(x), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <typename T, typename S = T>
constexpr T slope(T x, T t) {
  return S(0.5) * (S(1) + t) + S(0.5) * x * (S(1) - t * t) * S(kSqrt2OverPi) * (S(1) + S(3 * kCubic) * x * x);
}

}  // namespace kiln::gelu_tanh
