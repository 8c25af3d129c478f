// Element types of the kernels that read and write float16/bfloat16 arrays
// directly (elemwise.cu, nn.cu, reduce.cu): each value is loaded to float32,
// computed in float32 and rounded once when stored (to nearest even), the
// contract of the CPU's native 16-bit kernels. The conversions are those of
// the NVRTC-generated fused kernels (fused_codegen.cc): float16 through PTX
// `cvt`, bfloat16 by bit operations (NaN kept quiet), no cuda_fp16 header.
//
//   template <typename T> __global__ void k(const T* x, T* y, int64_t n) {
//     ... y[i] = store_as<T>(f(load_f32(x[i]))); ...
//   }
//   dispatch_float(dtype, [&](auto tag) { using T = decltype(tag); k<T><<<...>>>(...); });
//
// A 16-byte pack (Pack<T>: 4 float32 or 8 16-bit values) is what the dense
// paths load and store when the arrays are 16-byte aligned.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels.h"

namespace kiln::cuda {

// Storage of the two 16-bit float types (bit patterns).
struct Half16 {
  uint16_t bits;
};
struct Bfloat16 {
  uint16_t bits;
};

__device__ __forceinline__ float load_f32(float v) { return v; }
__device__ __forceinline__ float load_f32(Half16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}
__device__ __forceinline__ float load_f32(Bfloat16 h) { return __uint_as_float(static_cast<unsigned>(h.bits) << 16); }

template <typename T>
__device__ __forceinline__ T store_as(float f);
template <>
__device__ __forceinline__ float store_as<float>(float f) {
  return f;
}
template <>
__device__ __forceinline__ Half16 store_as<Half16>(float f) {
  Half16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
template <>
__device__ __forceinline__ Bfloat16 store_as<Bfloat16>(float f) {
  unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((x >> 16) | 0x40u)};
  x += 0x7fffu + ((x >> 16) & 1u);
  return {static_cast<uint16_t>(x >> 16)};
}

// A float value of dtype code `dtype` (float32, float16 or bfloat16) at p[i]:
// for the few per-output accesses where a template parameter is not worth it.
__device__ __forceinline__ float load_f32_dyn(const void* p, int dtype, int64_t i) {
  if (dtype == kDtypeFloat16) return load_f32(static_cast<const Half16*>(p)[i]);
  if (dtype == kDtypeBfloat16) return load_f32(static_cast<const Bfloat16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void store_f32_dyn(void* p, int dtype, int64_t i, float v) {
  if (dtype == kDtypeFloat16) static_cast<Half16*>(p)[i] = store_as<Half16>(v);
  else if (dtype == kDtypeBfloat16) static_cast<Bfloat16*>(p)[i] = store_as<Bfloat16>(v);
  else static_cast<float*>(p)[i] = v;
}

// 16 bytes of T as float32 values: pack index vi covers elements [vi * kN, vi * kN + kN).
template <typename T>
struct Pack {
  static constexpr int kN = 16 / static_cast<int>(sizeof(T));
  __device__ __forceinline__ static void load(const T* p, int64_t vi, float (&v)[kN]) {
    const uint4 q = reinterpret_cast<const uint4*>(p)[vi];
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[2 * e] = load_f32(T{static_cast<uint16_t>(w[e] & 0xffffu)});
      v[2 * e + 1] = load_f32(T{static_cast<uint16_t>(w[e] >> 16)});
    }
  }
  __device__ __forceinline__ static void store(T* p, int64_t vi, const float (&v)[kN]) {
    unsigned w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      w[e] = static_cast<unsigned>(store_as<T>(v[2 * e]).bits) |
             (static_cast<unsigned>(store_as<T>(v[2 * e + 1]).bits) << 16);
    reinterpret_cast<uint4*>(p)[vi] = make_uint4(w[0], w[1], w[2], w[3]);
  }
};
template <>
struct Pack<float> {
  static constexpr int kN = 4;
  __device__ __forceinline__ static void load(const float* p, int64_t vi, float (&v)[4]) {
    const float4 q = reinterpret_cast<const float4*>(p)[vi];
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  }
  __device__ __forceinline__ static void store(float* p, int64_t vi, const float (&v)[4]) {
    reinterpret_cast<float4*>(p)[vi] = make_float4(v[0], v[1], v[2], v[3]);
  }
};

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Calls fn(T{}) with T the storage type of float dtype code `dtype` (float32,
// float16 or bfloat16; host side of a .cu file); cudaErrorInvalidValue for
// other codes.
template <typename Fn>
cudaError_t dispatch_float(int dtype, Fn&& fn) {
  switch (dtype) {
    case kDtypeFloat32: fn(float{}); return cudaSuccess;
    case kDtypeFloat16: fn(Half16{}); return cudaSuccess;
    case kDtypeBfloat16: fn(Bfloat16{}); return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

}  // namespace kiln::cuda
