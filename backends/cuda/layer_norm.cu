// LayerNorm forward and backward on CUDA (launchers: layer_norm.h).
#include "backends/cuda/layer_norm.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ int64_t row_start(int64_t r, int64_t n, int64_t inner) {
  return (r / inner) * n * inner + r % inner;
}

__global__ void layer_norm_kernel(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                  float* sd, int64_t rows, int64_t n, int64_t inner, float eps) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; r < rows; r += warps) {
    const int64_t base = row_start(r, n, inner);
    float s = 0;
    for (int64_t i = lane; i < n; i += kWarp) s += x[base + i * inner];
    const float m = warp_sum(s) / static_cast<float>(n);
    float v = 0;
    for (int64_t i = lane; i < n; i += kWarp) {
      float d = x[base + i * inner] - m;
      v += d * d;
    }
    const float sdev = sqrtf(warp_sum(v) / static_cast<float>(n) + eps);
    const float inv = 1.0f / sdev;
    for (int64_t i = lane; i < n; i += kWarp) {
      const int64_t k = base + i * inner;
      y[k] = gamma[i] * ((x[k] - m) * inv) + beta[i];
    }
    if (lane == 0) {
      mean[r] = m;
      sd[r] = sdev;
    }
  }
}

__global__ void layer_norm_backward_data_kernel(const float* dy, const float* x, const float* gamma, const float* mean,
                                                const float* sd, float* dx, int64_t rows, int64_t n, int64_t inner) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; r < rows; r += warps) {
    const int64_t base = row_start(r, n, inner);
    const float m = mean[r], inv = 1.0f / sd[r];
    float sg = 0, sgx = 0;
    for (int64_t i = lane; i < n; i += kWarp) {
      const int64_t k = base + i * inner;
      const float g = dy[k] * gamma[i];
      sg += g;
      sgx += g * ((x[k] - m) * inv);
    }
    const float mg = warp_sum(sg) / static_cast<float>(n), mgx = warp_sum(sgx) / static_cast<float>(n);
    for (int64_t i = lane; i < n; i += kWarp) {
      const int64_t k = base + i * inner;
      const float xhat = (x[k] - m) * inv;
      dx[k] = (dy[k] * gamma[i] - mg - xhat * mgx) * inv;
    }
  }
}

__global__ void layer_norm_backward_params_kernel(const float* dy, const float* x, const float* mean, const float* sd,
                                                  float* dgamma, float* dbeta, int64_t rows, int64_t n, int64_t inner) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    double g = 0, b = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t k = row_start(r, n, inner) + i * inner;
      const float d = dy[k];
      g += static_cast<double>(d * ((x[k] - mean[r]) / sd[r]));
      b += static_cast<double>(d);
    }
    dgamma[i] = static_cast<float>(g);
    dbeta[i] = static_cast<float>(b);
  }
}

int blocks_for(int64_t items, int64_t per_block) {
  int64_t b = (items + per_block - 1) / per_block;
  return static_cast<int>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

}  // namespace

cudaError_t launch_layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* sd,
                              int64_t rows, int64_t n, int64_t inner, float eps, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  layer_norm_kernel<<<blocks_for(rows, kRowsPerBlock), kThreads, 0, s>>>(x, gamma, beta, y, mean, sd, rows, n, inner,
                                                                         eps);
  return cudaGetLastError();
}

cudaError_t launch_layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean,
                                       const float* sd, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t n,
                                       int64_t inner, cudaStream_t s) {
  if (rows > 0) {
    layer_norm_backward_data_kernel<<<blocks_for(rows, kRowsPerBlock), kThreads, 0, s>>>(dy, x, gamma, mean, sd, dx,
                                                                                         rows, n, inner);
  }
  // rows == 0 writes zeros: the parameters' gradients of an empty batch.
  layer_norm_backward_params_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(dy, x, mean, sd, dgamma, dbeta, rows,
                                                                                 n, inner);
  return cudaGetLastError();
}

}  // namespace kiln::cuda
