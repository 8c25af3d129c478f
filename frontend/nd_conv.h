// nd functions of the conv family: convolution, pooling and batch
// normalization on channel-first float32 arrays (ir/ops/conv.h has the
// attributes, with MXNet's names and defaults).
//
//   NDArray x = nd::random::normal({8, 3, 28, 28});
//   NDArray w = nd::random::normal({16, 3, 3, 3}), b = nd::zeros({16});
//   NDArray y = nd::convolution(x, w, b, {.kernel = {3, 3}, .pad = {1, 1}});  // [8,16,28,28]
//   NDArray z = nd::convolution(x, w, NDArray(), {.stride = {2, 2}});        // no bias; kernel from w
//   NDArray p = nd::pooling(y, {.kernel = {2, 2}, .pool_type = "max", .stride = {2, 2}});
//   NDArray n = nd::batch_norm(y, gamma, beta, moving_mean, moving_var, {.fix_gamma = false});
//
// Errors (at the call): ShapeError naming the shapes when weights or windows do
// not fit, TypeError for dtypes other than float32, ValueError for bad
// attributes. batch_norm in train mode (autograd::Record or TrainMode) updates
// moving_mean and moving_var in place.
#pragma once

#include <vector>

#include "frontend/ndarray.h"
#include "ir/ops/conv.h"

namespace kiln::nd {

// `bias` none means no bias. An empty attrs.kernel and a zero num_filter are
// taken from the weight's shape; no_bias follows `bias`.
NDArray convolution(const NDArray& data, const NDArray& weight, const NDArray& bias, ConvolutionAttrs attrs = {});
NDArray pooling(const NDArray& data, const PoolingAttrs& attrs);
// The normalized data (output 0).
NDArray batch_norm(const NDArray& data, const NDArray& gamma, const NDArray& beta, const NDArray& moving_mean,
                   const NDArray& moving_var, const BatchNormAttrs& attrs = {});
// All three outputs: normalized data, the mean and the variance used.
std::vector<NDArray> batch_norm_all(const NDArray& data, const NDArray& gamma, const NDArray& beta,
                                    const NDArray& moving_mean, const NDArray& moving_var,
                                    const BatchNormAttrs& attrs = {});

}  // namespace kiln::nd
