// softmax with use_length on CUDA (launcher: softmax_length.h).
#include "backends/cuda/softmax_length.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void softmax_length_kernel(const float* x, const int64_t* lengths, float* y, int64_t outer, int64_t n,
                                      int64_t inner, float inv_t) {
  const int64_t rows = outer * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    int64_t len = lengths[r];
    len = len < 0 ? 0 : (len > n ? n : len);
    float m = -INFINITY;
    for (int64_t j = 0; j < len; ++j) m = fmaxf(m, x[base + j * inner] * inv_t);
    double total = 0;
    for (int64_t j = 0; j < len; ++j) total += expf(x[base + j * inner] * inv_t - m);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      y[k] = j < len ? static_cast<float>(expf(x[k] * inv_t - m) / total) : 0.0f;
    }
  }
}

}  // namespace

cudaError_t launch_softmax_length(const float* x, const int64_t* lengths, float* y, int64_t outer, int64_t n,
                                  int64_t inner, float inv_temperature, cudaStream_t s) {
  const int64_t rows = outer * inner;
  if (rows == 0) return cudaSuccess;
  int64_t blocks = (rows + kThreads - 1) / kThreads;
  softmax_length_kernel<<<static_cast<int>(blocks > 4096 ? 4096 : blocks), kThreads, 0, s>>>(x, lengths, y, outer, n,
                                                                                             inner, inv_temperature);
  return cudaGetLastError();
}

}  // namespace kiln::cuda
