// Launchers of LayerNorm's CUDA kernels (layer_norm.cu), float32; semantics
// in ir/ops/layer_norm.h. Plain arguments, so the .cu file includes no Kiln
// header but this one.
//
// data is `rows` rows of n elements; row r starts at (r / inner) * n * inner
// + r % inner and steps by inner (inner == 1: contiguous rows). mean and sd
// hold one value per row.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kiln::cuda {

// One warp per row: two-pass mean and variance, then y = gamma * xhat + beta.
cudaError_t launch_layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* sd,
                              int64_t rows, int64_t n, int64_t inner, float eps, cudaStream_t s);
// dx per row (one warp per row), then d_gamma and d_beta per column (one
// thread per column summing every row in order, in double).
cudaError_t launch_layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean,
                                       const float* sd, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t n,
                                       int64_t inner, cudaStream_t s);

}  // namespace kiln::cuda
