// Kiln's elementwise CUDA kernels: grid-stride loops, 16-byte loads (float4,
// or 8 float16/bfloat16 values) where the arrays are dense and 16-byte
// aligned. One kernel per shape of work and element type (float32, float16,
// bfloat16: half_io.cuh; computed in float32, rounded once), the op chosen by
// a runtime switch (uniform across the grid, so it costs a branch per
// element, not divergence), which keeps nvcc's work and the binary small.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "backends/counter_rng.h"
#include "backends/cuda/elemwise_ops.cuh"
#include "backends/cuda/half_io.cuh"
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

// y = op(x): dense; 16-byte packs (4 float32 or 8 16-bit values) when both
// arrays are 16-byte aligned, then the tail element by element.
template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* __restrict__ x, T* __restrict__ y, int64_t n, float p0, float p1) {
  using P = Pack<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (aligned16(x) && aligned16(y)) {
    const int64_t packs = n / P::kN;
    for (int64_t i = start; i < packs; i += stride) {
      P v;
      v.load(x, i);
#pragma unroll(P::kUnroll)
      for (int e = 0; e < P::kN; ++e) v.set(e, apply_unary(op, v.get(e), p0, p1));
      v.store(y, i);
    }
    done = packs * P::kN;
  }
  for (int64_t i = done + start; i < n; i += stride) y[i] = store_as<T>(apply_unary(op, load_f32(x[i]), p0, p1));
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

// y = op(a, b). Dense operands and scalars share one loop (16-byte packs
// when aligned): `scalar_side` 1 puts the scalar on the right, 2 on the left.
template <typename T>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, T* y, int64_t n, BroadcastIndex ix,
                              int scalar_side, float scalar, float p0) {
  using P = Pack<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ix.ndim == 0 || scalar_side != 0) {
    // x: the array operand (a, or b when the scalar is on the left); z: the other array, if any.
    const T* x = scalar_side == 2 ? b : a;
    const T* z = scalar_side == 0 ? b : x;
    const bool left = scalar_side == 2;  // x is the right operand
    int64_t done = 0;
    if (aligned16(x) && aligned16(z) && aligned16(y)) {
      const int64_t packs = n / P::kN;
      for (int64_t i = start; i < packs; i += stride) {
        P vx, vz;
        vx.load(x, i);
        if (scalar_side == 0) vz.load(z, i);
#pragma unroll(P::kUnroll)
        for (int e = 0; e < P::kN; ++e) {
          const float u = vx.get(e), w = scalar_side == 0 ? vz.get(e) : scalar;
          vx.set(e, apply_binary(op, left ? w : u, left ? u : w, p0));
        }
        vx.store(y, i);
      }
      done = packs * P::kN;
    }
    for (int64_t i = done + start; i < n; i += stride) {
      const float u = load_f32(x[i]), w = scalar_side == 0 ? load_f32(z[i]) : scalar;
      y[i] = store_as<T>(apply_binary(op, left ? w : u, left ? u : w, p0));
    }
    return;
  }
  // Broadcast: element by element (an index division per axis dominates).
  for (int64_t i = start; i < n; i += stride) {
    int64_t ia, ib;
    broadcast_offsets(ix, i, ia, ib);
    y[i] = store_as<T>(apply_binary(op, load_f32(a[ia]), load_f32(b[ib]), p0));
  }
}

// The condition's bits at i (cond_size bytes), without the sign bit when floating.
__device__ __forceinline__ bool cond_at(const void* c, int size, bool floating, int64_t i) {
  switch (size) {
    case 1: return (static_cast<const uint8_t*>(c)[i] & (floating ? 0x7fu : 0xffu)) != 0;
    case 2: return (static_cast<const uint16_t*>(c)[i] & (floating ? 0x7fffu : 0xffffu)) != 0;
    case 4: return (static_cast<const uint32_t*>(c)[i] & (floating ? 0x7fffffffu : 0xffffffffu)) != 0;
    default:
      return (static_cast<const uint64_t*>(c)[i] & (floating ? 0x7fffffffffffffffull : 0xffffffffffffffffull)) != 0;
  }
}

template <typename V>
__global__ void where_kernel(const void* c, int cond_size, bool cond_floating, const V* x, const V* y, V* out,
                             int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = cond_at(c, cond_size, cond_floating, i) ? x[i] : y[i];
}

template <typename T>
struct Inputs8 {
  const T* p[8];
};

// Out is T, or float for a partial sum of a longer list.
template <typename T, typename Out>
__global__ void add_n_kernel(Inputs8<T> in, int count, const float* partial, Out* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float s = partial ? partial[i] : 0.0f;
    for (int k = 0; k < count; ++k) s += load_f32(in.p[k][i]);
    y[i] = store_as<Out>(s);
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

template <typename T>
__global__ void dropout_mask_kernel(T* mask, int64_t n, double keep, uint64_t seed, uint64_t offset) {
  const T scale = store_as<T>(keep > 0 ? static_cast<float>(1.0 / keep) : 0.0f), zero = store_as<T>(0.0f);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    mask[i] = uniform_at(seed, offset + static_cast<uint64_t>(i)) < keep ? scale : zero;
}

}  // namespace

cudaError_t launch_unary(UnaryOp op, int dtype, const void* x, void* y, int64_t n, float p0, float p1,
                         cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  cudaError_t e = dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    unary_kernel<T><<<blocks_for(n / Pack<T>::kN + 1), kThreads, 0, s>>>(op, static_cast<const T*>(x),
                                                                        static_cast<T*>(y), n, p0, p1);
  });
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t launch_binary(BinaryOp op, int dtype, const void* a, const void* b, void* y, int64_t n,
                          const BroadcastIndex& index, int scalar_side, float scalar, float p0, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  cudaError_t e = dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    binary_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(op, static_cast<const T*>(a), static_cast<const T*>(b),
                                                        static_cast<T*>(y), n, index, scalar_side, scalar, p0);
  });
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t launch_where(const void* cond, int cond_size, bool cond_floating, const void* x, const void* y, void* out,
                         int elem_size, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (cond_size != 1 && cond_size != 2 && cond_size != 4 && cond_size != 8) return cudaErrorInvalidValue;
  const int blocks = blocks_for(n);
  auto run = [&](auto tag) {
    using V = decltype(tag);
    where_kernel<V><<<blocks, kThreads, 0, s>>>(cond, cond_size, cond_floating, static_cast<const V*>(x),
                                                static_cast<const V*>(y), static_cast<V*>(out), n);
  };
  switch (elem_size) {
    case 1: run(uint8_t{}); break;
    case 2: run(uint16_t{}); break;
    case 4: run(uint32_t{}); break;
    case 8: run(uint64_t{}); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_add_n(const void* const* inputs, int count, int dtype, const float* partial, void* y, int y_dtype,
                         int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (y_dtype != dtype && y_dtype != kDtypeFloat32) return cudaErrorInvalidValue;
  cudaError_t e = dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    Inputs8<T> in{};
    for (int k = 0; k < count && k < 8; ++k) in.p[k] = static_cast<const T*>(inputs[k]);
    const int used = count < 8 ? count : 8;
    if (y_dtype == dtype)
      add_n_kernel<T, T><<<blocks_for(n), kThreads, 0, s>>>(in, used, partial, static_cast<T*>(y), n);
    else if constexpr (!std::is_same_v<T, float>)
      add_n_kernel<T, float><<<blocks_for(n), kThreads, 0, s>>>(in, used, partial, static_cast<float*>(y), n);
  });
  return e != cudaSuccess ? e : cudaGetLastError();
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

cudaError_t launch_dropout_mask(int dtype, void* mask, int64_t n, double keep, uint64_t seed, uint64_t offset,
                                cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  cudaError_t e = dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    dropout_mask_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(mask), n, keep, seed, offset);
  });
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace kiln::cuda
