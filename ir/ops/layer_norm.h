// Attributes and geometry of LayerNorm and _backward_LayerNorm (MXNet's
// LayerNorm: names, defaults and outputs as MXNet has them, so exported
// graphs round-trip).
//
//   LayerNormAttrs a{.axis = -1, .eps = 1e-5};
//   std::vector<NDArray> o = invoke(OpId::kLayerNorm, {x, gamma, beta}, OpAttrs::make(a));   // out, mean, std
//
// LayerNorm(data, gamma, beta) -> (out, mean, std): along `axis` (of length
// n), mean = sum(x) / n, var = sum((x - mean)^2) / n (biased), std =
// sqrt(var + eps), out = gamma * (x - mean) / std + beta, gamma and beta of
// shape [n] broadcast along the axis. mean and std have data's shape with
// `axis` of length 1. output_mean_var is accepted and printed (MXNet shows
// mean and std only when it is set); Kiln always returns all three outputs.
// float32 (accumulated in float32) and float64.
//
// _backward_LayerNorm(out_grad, data, gamma, mean, std) -> (d_data, d_gamma,
// d_beta) with xhat = (x - mean) / std, g = out_grad * gamma:
//   d_data  = (g - mean_axis(g) - xhat * mean_axis(g * xhat)) / std
//   d_gamma = sum over every axis but `axis` of out_grad * xhat
//   d_beta  = sum over every axis but `axis` of out_grad
// evaluated at the given mean and std (not recomputed from data), so that the
// op is a function of its five inputs that ordinary ops also express; its own
// gradient (second order) is that expression differentiated.
#pragma once

#include <cstdint>

#include "ir/attrs.h"
#include "ir/shape.h"

namespace kiln {

struct LayerNormAttrs {
  int axis = -1;
  double eps = 1e-5;
  bool output_mean_var = false;
  template <typename V>
  void fields(V& v) {
    v("axis", axis);
    v("eps", eps);
    v("output_mean_var", output_mean_var);
  }
};

// data seen as [outer, n, inner] around the normalized axis.
struct LayerNormDims {
  int axis = 0;
  int64_t outer = 1, n = 1, inner = 1;
};

// ShapeError for a scalar data or an axis of length 0, IndexError for an
// axis out of range (naming the shape and the axis).
LayerNormDims layer_norm_dims(const LayerNormAttrs& a, const Shape& data);

// data's shape with the normalized axis of length 1: the shape of mean and std.
Shape layer_norm_stat_shape(const LayerNormDims& d, const Shape& data);

}  // namespace kiln
