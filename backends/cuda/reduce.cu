// Reductions over axes (sum, mean, max, min, prod, L1/L2 norm, argmax/argmin):
// one block per output element, each thread strides over the reduced
// elements, then a shared-memory tree combines the block. Simple and correct
// for every axis layout; a warp-per-row or two-pass variant for very long
// reductions into few outputs is future work (README.md).
#include <cfloat>

#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float identity_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: case ReduceOp::kArgmax: return -INFINITY;
    case ReduceOp::kMin: case ReduceOp::kArgmin: return INFINITY;
    case ReduceOp::kProd: return 1.0f;
    default: return 0.0f;
  }
}

__device__ __forceinline__ float combine(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::kMax: return (a > b || a != a) ? a : b;
    case ReduceOp::kMin: return (a < b || a != a) ? a : b;
    case ReduceOp::kProd: return a * b;
    default: return a + b;
  }
}

__device__ __forceinline__ float prepare(ReduceOp op, float v) {
  if (op == ReduceOp::kNormL1) return fabsf(v);
  if (op == ReduceOp::kNormL2) return v * v;
  return v;
}

__global__ void reduce_kernel(ReduceOp op, const float* __restrict__ x, float* __restrict__ y, ReduceIndex ix) {
  __shared__ float values[kThreads];
  __shared__ int64_t positions[kThreads];
  const bool arg = op == ReduceOp::kArgmax || op == ReduceOp::kArgmin;
  for (int64_t o = blockIdx.x; o < ix.outputs; o += gridDim.x) {
    int64_t base = 0, rest = o;
    for (int d = ix.outer_ndim - 1; d >= 0; --d) {
      base += (rest % ix.outer_shape[d]) * ix.outer_stride[d];
      rest /= ix.outer_shape[d];
    }
    float acc = identity_of(op);
    int64_t pos = ix.count;  // "none yet": larger than any index
    for (int64_t k = threadIdx.x; k < ix.count; k += blockDim.x) {
      int64_t off = base, r = k;
      for (int d = ix.inner_ndim - 1; d >= 0; --d) {
        off += (r % ix.inner_shape[d]) * ix.inner_stride[d];
        r /= ix.inner_shape[d];
      }
      float v = prepare(op, x[off]);
      if (arg) {
        bool better = op == ReduceOp::kArgmax ? (v > acc || (v != v && acc == acc)) : (v < acc || (v != v && acc == acc));
        if (pos == ix.count || better) {
          if (pos == ix.count || better) {
            acc = v;
            pos = k;
          }
        }
      } else {
        acc = combine(op, acc, v);
      }
    }
    values[threadIdx.x] = acc;
    positions[threadIdx.x] = pos;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) {
        float a = values[threadIdx.x], b = values[threadIdx.x + half];
        if (arg) {
          int64_t pa = positions[threadIdx.x], pb = positions[threadIdx.x + half];
          bool take_b;
          if (pb == ix.count) take_b = false;
          else if (pa == ix.count) take_b = true;
          else if (a != a) take_b = b != b && pb < pa;  // first NaN wins
          else if (b != b) take_b = true;
          else if (a == b) take_b = pb < pa;  // first occurrence wins
          else take_b = op == ReduceOp::kArgmax ? b > a : b < a;
          if (take_b) {
            values[threadIdx.x] = b;
            positions[threadIdx.x] = pb;
          }
        } else {
          values[threadIdx.x] = combine(op, a, b);
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      float r = values[0];
      if (op == ReduceOp::kMean) r = ix.count > 0 ? r / static_cast<float>(ix.count) : NAN;
      if (op == ReduceOp::kNormL2) r = sqrtf(r);
      if (arg) r = static_cast<float>(positions[0] == ix.count ? 0 : positions[0]);
      y[o] = r;
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t launch_reduce(ReduceOp op, const float* x, float* y, const ReduceIndex& index, cudaStream_t s) {
  if (index.outputs == 0) return cudaSuccess;
  int64_t blocks = index.outputs < 65535 * 8 ? index.outputs : 65535 * 8;
  reduce_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(op, x, y, index);
  return cudaGetLastError();
}

}  // namespace kiln::cuda
