// Layer normalization on NDArrays (the LayerNorm op, ir/ops/layer_norm.h).
//
//   NDArray y = nd::layer_norm(x, gamma, beta);                   // along the last axis, eps 1e-5
//   auto [out, mean, std] = nd::layer_norm_all(x, gamma, beta, {.axis = 1});
//
// gamma and beta have shape [n], n = x's length on `axis`; mean and std have
// x's shape with that axis of length 1 (std includes eps). Differentiable
// twice in all three outputs. float32 and float64.
#pragma once

#include <array>

#include "frontend/ndarray.h"
#include "ir/ops/layer_norm.h"

namespace kiln::nd {

NDArray layer_norm(const NDArray& data, const NDArray& gamma, const NDArray& beta, const LayerNormAttrs& attrs = {});
// (out, mean, std).
std::array<NDArray, 3> layer_norm_all(const NDArray& data, const NDArray& gamma, const NDArray& beta,
                                      const LayerNormAttrs& attrs = {});

}  // namespace kiln::nd
