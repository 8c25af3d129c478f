// Kiln's elementwise CUDA kernels: grid-stride loops, float4 loads where the
// arrays are dense and 16-byte aligned. One kernel per shape of work, the op
// chosen by a runtime switch (uniform across the grid, so it costs a branch
// per element, not divergence), which keeps nvcc's work and the binary small.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/counter_rng.h"
#include "backends/cuda/elemwise_ops.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  int64_t needed = (n + kThreads - 1) / kThreads;
  int64_t cap = static_cast<int64_t>(sms > 0 ? sms : 80) * 8;
  return static_cast<int>(needed < 1 ? 1 : (needed < cap ? needed : cap));
}

__global__ void unary_kernel(UnaryOp op, const float* __restrict__ x, float* __restrict__ y, int64_t n, float p0,
                             float p1) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  int64_t done = 0;
  if (aligned) {
    const int64_t n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = start; i < n4; i += stride) {
      float4 v = x4[i];
      v.x = apply_unary(op, v.x, p0, p1);
      v.y = apply_unary(op, v.y, p0, p1);
      v.z = apply_unary(op, v.z, p0, p1);
      v.w = apply_unary(op, v.w, p0, p1);
      y4[i] = v;
    }
    done = n4 * 4;
  }
  for (int64_t i = done + start; i < n; i += stride) y[i] = apply_unary(op, x[i], p0, p1);
}

__device__ __forceinline__ void broadcast_offsets(const BroadcastIndex& ix, int64_t i, int64_t& ia, int64_t& ib) {
  ia = 0;
  ib = 0;
  for (int d = ix.ndim - 1; d >= 0; --d) {
    int64_t c = i % ix.shape[d];
    i /= ix.shape[d];
    ia += c * ix.a_stride[d];
    ib += c * ix.b_stride[d];
  }
}

__global__ void binary_kernel(BinaryOp op, const float* a, const float* b, float* y, int64_t n, BroadcastIndex ix,
                              int scalar_side, float scalar, float p0) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (scalar_side != 0) {
    const float* x = scalar_side == 1 ? a : b;
    for (int64_t i = start; i < n; i += stride)
      y[i] = scalar_side == 1 ? apply_binary(op, x[i], scalar, p0) : apply_binary(op, scalar, x[i], p0);
    return;
  }
  if (ix.ndim == 0) {
    const bool aligned =
        ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
    int64_t done = 0;
    if (aligned) {
      const int64_t n4 = n / 4;
      for (int64_t i = start; i < n4; i += stride) {
        float4 va = reinterpret_cast<const float4*>(a)[i];
        float4 vb = reinterpret_cast<const float4*>(b)[i];
        float4 r;
        r.x = apply_binary(op, va.x, vb.x, p0);
        r.y = apply_binary(op, va.y, vb.y, p0);
        r.z = apply_binary(op, va.z, vb.z, p0);
        r.w = apply_binary(op, va.w, vb.w, p0);
        reinterpret_cast<float4*>(y)[i] = r;
      }
      done = n4 * 4;
    }
    for (int64_t i = done + start; i < n; i += stride) y[i] = apply_binary(op, a[i], b[i], p0);
    return;
  }
  for (int64_t i = start; i < n; i += stride) {
    int64_t ia, ib;
    broadcast_offsets(ix, i, ia, ib);
    y[i] = apply_binary(op, a[ia], b[ib], p0);
  }
}

__global__ void where_kernel(const float* c, const float* x, const float* y, float* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = c[i] != 0.0f ? x[i] : y[i];
}

struct Inputs8 {
  const float* p[8];
};

__global__ void add_n_kernel(Inputs8 in, int count, float* y, int64_t n, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float s = accumulate ? y[i] : 0.0f;
    for (int k = 0; k < count; ++k) s += in.p[k][i];
    y[i] = s;
  }
}

// ---- any dtype: values travel as double (exact for every supported dtype
// except int64 beyond 2^53, which only Cast between int64 arrays could meet:
// that case copies the integer directly).

__device__ __forceinline__ double load_as_double(const void* p, int dtype, int64_t i) {
  switch (dtype) {
    case 0: return static_cast<const float*>(p)[i];
    case 1: return static_cast<const double*>(p)[i];
    case 2: return __half2float(static_cast<const __half*>(p)[i]);
    case 3: return static_cast<const uint8_t*>(p)[i];
    case 4: return static_cast<const int32_t*>(p)[i];
    case 5: return static_cast<const int8_t*>(p)[i];
    case 6: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case 7: return static_cast<const uint8_t*>(p)[i] != 0 ? 1.0 : 0.0;
    case 12: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
  return 0.0;
}

__device__ __forceinline__ void store_double(void* p, int dtype, int64_t i, double v) {
  switch (dtype) {
    case 0: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case 1: static_cast<double*>(p)[i] = v; return;
    case 2: static_cast<__half*>(p)[i] = __float2half(static_cast<float>(v)); return;
    case 3: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); return;
    case 4: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); return;
    case 5: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); return;
    case 6: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); return;
    case 7: static_cast<uint8_t*>(p)[i] = v != 0.0 ? 1 : 0; return;
    case 12: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(static_cast<float>(v)); return;
  }
}

__global__ void cast_kernel(const void* x, int din, void* y, int dout, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (din == 6 && dout == 6) {
      static_cast<int64_t*>(y)[i] = static_cast<const int64_t*>(x)[i];
    } else {
      store_double(y, dout, i, load_as_double(x, din, i));
    }
  }
}

__global__ void channel_bias_kernel(void* y, int dy, const void* bias, int db, int64_t n, int64_t channels,
                                    int64_t inner) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float b = static_cast<float>(load_as_double(bias, db, (i / inner) % channels));
    store_double(y, dy, i, static_cast<float>(load_as_double(y, dy, i)) + b);
  }
}

template <typename T>
__global__ void strided_copy_kernel(const T* x, T* y, StridedIndex ix, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t rest = i, in = ix.in_offset, out = ix.out_offset;
    for (int d = ix.ndim - 1; d >= 0; --d) {
      int64_t c = rest % ix.shape[d];
      rest /= ix.shape[d];
      in += c * ix.in_stride[d];
      out += c * ix.out_stride[d];
    }
    y[out] = x[in];
  }
}

__global__ void fill_kernel(void* y, int dtype, int64_t n, double value, double step, int64_t repeat, int kind) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    store_double(y, dtype, i, kind == 0 ? value : value + static_cast<double>(i / repeat) * step);
}

using rng::uniform_at;  // the stream of backends/counter_rng.h, as on the CPU

__global__ void random_kernel(void* y, int dtype, int64_t n, double a, double b, uint64_t seed, uint64_t offset,
                              int kind) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint64_t pos = offset + static_cast<uint64_t>(i);
    double v;
    if (kind == 0) {
      v = a + (b - a) * uniform_at(seed, pos);
    } else {  // Box-Muller on pairs, as backends/cpu/init.cc
      uint64_t pair = pos / 2;
      double u1 = 1.0 - uniform_at(seed, 2 * pair);
      double u2 = uniform_at(seed, 2 * pair + 1);
      double r = sqrt(-2.0 * log(u1));
      double theta = 2.0 * 3.14159265358979323846 * u2;
      v = a + b * r * ((pos & 1) ? sin(theta) : cos(theta));
    }
    store_double(y, dtype, i, v);
  }
}

__global__ void dropout_mask_kernel(float* mask, int64_t n, double keep, uint64_t seed, uint64_t offset) {
  const float scale = keep > 0 ? static_cast<float>(1.0 / keep) : 0.0f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    mask[i] = uniform_at(seed, offset + static_cast<uint64_t>(i)) < keep ? scale : 0.0f;
}

}  // namespace

cudaError_t launch_unary(UnaryOp op, const float* x, float* y, int64_t n, float p0, float p1, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  unary_kernel<<<blocks_for(n / 4 + 1), kThreads, 0, s>>>(op, x, y, n, p0, p1);
  return cudaGetLastError();
}

cudaError_t launch_binary(BinaryOp op, const float* a, const float* b, float* y, int64_t n,
                          const BroadcastIndex& index, int scalar_side, float scalar, float p0, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  binary_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, a, b, y, n, index, scalar_side, scalar, p0);
  return cudaGetLastError();
}

cudaError_t launch_where(const float* cond, const float* x, const float* y, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  where_kernel<<<blocks_for(n), kThreads, 0, s>>>(cond, x, y, out, n);
  return cudaGetLastError();
}

cudaError_t launch_add_n(const float* const* inputs, int count, float* y, int64_t n, bool accumulate, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  Inputs8 in{};
  for (int k = 0; k < count && k < 8; ++k) in.p[k] = inputs[k];
  add_n_kernel<<<blocks_for(n), kThreads, 0, s>>>(in, count < 8 ? count : 8, y, n, accumulate);
  return cudaGetLastError();
}

cudaError_t launch_cast(const void* x, int dtype_in, void* y, int dtype_out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  cast_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, dtype_in, y, dtype_out, n);
  return cudaGetLastError();
}

cudaError_t launch_add_channel_bias(void* y, int dtype_y, const void* bias, int dtype_bias, int64_t n,
                                    int64_t channels, int64_t inner, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  channel_bias_kernel<<<blocks_for(n), kThreads, 0, s>>>(y, dtype_y, bias, dtype_bias, n, channels, inner);
  return cudaGetLastError();
}

cudaError_t launch_strided_copy(const void* x, void* y, int elem_size, const StridedIndex& index, cudaStream_t s) {
  int64_t n = 1;
  for (int d = 0; d < index.ndim; ++d) n *= index.shape[d];
  if (n == 0) return cudaSuccess;
  int blocks = blocks_for(n);
  switch (elem_size) {
    case 1:
      strided_copy_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), index, n);
      break;
    case 2:
      strided_copy_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), index,
                                                      n);
      break;
    case 4:
      strided_copy_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), index,
                                                      n);
      break;
    case 8:
      strided_copy_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y), index,
                                                      n);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_fill(void* y, int dtype, int64_t n, double value, double step, int64_t repeat, int kind,
                        cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(n), kThreads, 0, s>>>(y, dtype, n, value, step, repeat < 1 ? 1 : repeat, kind);
  return cudaGetLastError();
}

cudaError_t launch_random(void* y, int dtype, int64_t n, double a, double b, uint64_t seed, uint64_t offset, int kind,
                          cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  random_kernel<<<blocks_for(n), kThreads, 0, s>>>(y, dtype, n, a, b, seed, offset, kind);
  return cudaGetLastError();
}

cudaError_t launch_dropout_mask(float* mask, int64_t n, double keep, uint64_t seed, uint64_t offset, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  dropout_mask_kernel<<<blocks_for(n), kThreads, 0, s>>>(mask, n, keep, seed, offset);
  return cudaGetLastError();
}

}  // namespace kiln::cuda
