// softmax with use_length on CUDA (launcher: softmax_length.h); float32, float16
// or bfloat16 data computed in float32 (half_io.cuh).
#include "backends/cuda/softmax_length.h"

#include "backends/cuda/half_io.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void softmax_length_kernel(const T* x, const int64_t* lengths, T* y, int64_t outer, int64_t n,
                                      int64_t inner, float inv_t) {
  const int64_t rows = outer * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    int64_t len = lengths[r];
    len = len < 0 ? 0 : (len > n ? n : len);
    float m = -INFINITY;
    for (int64_t j = 0; j < len; ++j) m = fmaxf(m, load_f32(x[base + j * inner]) * inv_t);
    double total = 0;
    for (int64_t j = 0; j < len; ++j) total += expf(load_f32(x[base + j * inner]) * inv_t - m);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      y[k] = store_as<T>(j < len ? static_cast<float>(expf(load_f32(x[k]) * inv_t - m) / total) : 0.0f);
    }
  }
}

}  // namespace

cudaError_t launch_softmax_length(int dtype, const void* x, const int64_t* lengths, void* y, int64_t outer, int64_t n,
                                  int64_t inner, float inv_temperature, cudaStream_t s) {
  const int64_t rows = outer * inner;
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = (rows + kThreads - 1) / kThreads;
  cudaError_t e = dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_length_kernel<T><<<static_cast<int>(blocks > 4096 ? 4096 : blocks), kThreads, 0, s>>>(
        static_cast<const T*>(x), lengths, static_cast<T*>(y), outer, n, inner, inv_temperature);
  });
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace kiln::cuda
