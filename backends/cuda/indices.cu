// Gathers and scatters by (already resolved) int64 indices: take and its
// backward, pick and its backward, one_hot.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > 8192 ? 8192 : b));
}

#define KILN_GRID_STRIDE(i, n)                                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);         \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename U>
__global__ void take_kernel(const U* x, U* y, const int64_t* ids, int64_t outer, int64_t n, int64_t m, int64_t inner) {
  KILN_GRID_STRIDE(t, outer * m * inner) {
    int64_t i = t % inner, j = (t / inner) % m, o = t / (inner * m);
    y[t] = x[(o * n + ids[j]) * inner + i];
  }
}

__global__ void take_backward_kernel(const float* dy, float* dx, const int64_t* ids, int64_t outer, int64_t n,
                                     int64_t m, int64_t inner) {
  KILN_GRID_STRIDE(t, outer * m * inner) {
    int64_t i = t % inner, j = (t / inner) % m, o = t / (inner * m);
    atomicAdd(&dx[(o * n + ids[j]) * inner + i], dy[t]);
  }
}

__global__ void pick_kernel(const float* x, float* y, const int64_t* ids, int64_t outer, int64_t n, int64_t inner,
                            bool backward) {
  KILN_GRID_STRIDE(t, outer * inner) {
    int64_t o = t / inner, c = t % inner;
    int64_t k = (o * n + ids[t]) * inner + c;
    if (backward) {
      y[k] = x[t];
    } else {
      y[t] = x[k];
    }
  }
}

__global__ void one_hot_kernel(void* y, int dtype, const int64_t* ids, int64_t count, int64_t depth, double on,
                               double off) {
  KILN_GRID_STRIDE(t, count * depth) {
    double v = ids[t / depth] == t % depth ? on : off;
    switch (dtype) {
      case 0: static_cast<float*>(y)[t] = static_cast<float>(v); break;
      case 1: static_cast<double*>(y)[t] = v; break;
      case 2: static_cast<__half*>(y)[t] = __float2half(static_cast<float>(v)); break;
      case 3: static_cast<uint8_t*>(y)[t] = static_cast<uint8_t>(v); break;
      case 4: static_cast<int32_t*>(y)[t] = static_cast<int32_t>(v); break;
      case 5: static_cast<int8_t*>(y)[t] = static_cast<int8_t>(v); break;
      case 6: static_cast<int64_t*>(y)[t] = static_cast<int64_t>(v); break;
      case 7: static_cast<uint8_t*>(y)[t] = v != 0.0 ? 1 : 0; break;
      case 12: static_cast<__nv_bfloat16*>(y)[t] = __float2bfloat16(static_cast<float>(v)); break;
    }
  }
}

}  // namespace

cudaError_t launch_take(const void* x, void* y, const int64_t* ids, int64_t outer, int64_t n, int64_t m,
                        int64_t inner, int elem_size, cudaStream_t s) {
  int64_t total = outer * m * inner;
  if (total == 0) return cudaSuccess;
  int b = blocks_for(total);
  switch (elem_size) {
    case 1: take_kernel<<<b, kThreads, 0, s>>>(static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), ids, outer, n, m, inner); break;
    case 2: take_kernel<<<b, kThreads, 0, s>>>(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), ids, outer, n, m, inner); break;
    case 4: take_kernel<<<b, kThreads, 0, s>>>(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), ids, outer, n, m, inner); break;
    case 8: take_kernel<<<b, kThreads, 0, s>>>(static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y), ids, outer, n, m, inner); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_take_backward(const float* dy, float* dx, const int64_t* ids, int64_t outer, int64_t n, int64_t m,
                                 int64_t inner, cudaStream_t s) {
  int64_t total = outer * m * inner;
  if (total == 0) return cudaSuccess;
  take_backward_kernel<<<blocks_for(total), kThreads, 0, s>>>(dy, dx, ids, outer, n, m, inner);
  return cudaGetLastError();
}

cudaError_t launch_pick(const float* x, float* y, const int64_t* ids, int64_t outer, int64_t n, int64_t inner,
                        bool backward, cudaStream_t s) {
  if (outer * inner == 0) return cudaSuccess;
  pick_kernel<<<blocks_for(outer * inner), kThreads, 0, s>>>(x, y, ids, outer, n, inner, backward);
  return cudaGetLastError();
}

cudaError_t launch_one_hot(void* y, int dtype, const int64_t* ids, int64_t count, int64_t depth, double on, double off,
                           cudaStream_t s) {
  if (count * depth == 0) return cudaSuccess;
  one_hot_kernel<<<blocks_for(count * depth), kThreads, 0, s>>>(y, dtype, ids, count, depth, on, off);
  return cudaGetLastError();
}

}  // namespace kiln::cuda
