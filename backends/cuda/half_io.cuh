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

// 16 bytes of T (4 float32 or 8 16-bit values) held as a uint4, element e
// read and written as float32. kUnroll is how far a loop over the elements
// should unroll: fully for float32 (4 inlined copies of the loop body, as the
// float4 paths always had), not at all for 16-bit values (e a run-time index
// that selects a word and a half: the op's switch inlined once instead of 8
// times, which keeps nvcc's time and the binary near the float32-only size).
//
//   Pack<T> v;  v.load(x, i);
//   #pragma unroll(Pack<T>::kUnroll)
//   for (int e = 0; e < Pack<T>::kN; ++e) v.set(e, f(v.get(e)));
//   v.store(y, i);
template <typename T>
struct Pack {
  static constexpr int kN = 16 / static_cast<int>(sizeof(T));
  static constexpr int kUnroll = sizeof(T) == 4 ? kN : 1;
  uint4 q;

  __device__ __forceinline__ void load(const T* p, int64_t vi) { q = reinterpret_cast<const uint4*>(p)[vi]; }
  __device__ __forceinline__ void store(T* p, int64_t vi) const { reinterpret_cast<uint4*>(p)[vi] = q; }
  __device__ __forceinline__ unsigned word(int w) const { return w == 0 ? q.x : w == 1 ? q.y : w == 2 ? q.z : q.w; }
  __device__ __forceinline__ void set_word(int w, unsigned v) {
    if (w == 0) q.x = v;
    else if (w == 1) q.y = v;
    else if (w == 2) q.z = v;
    else q.w = v;
  }
  __device__ __forceinline__ float get(int e) const {
    if constexpr (sizeof(T) == 4) {
      return __uint_as_float(word(e));
    } else {
      return load_f32(T{static_cast<uint16_t>(word(e >> 1) >> (16 * (e & 1)))});
    }
  }
  __device__ __forceinline__ void set(int e, float v) {
    if constexpr (sizeof(T) == 4) {
      set_word(e, __float_as_uint(v));
    } else {
      const int shift = 16 * (e & 1);
      const unsigned bits = static_cast<unsigned>(store_as<T>(v).bits) << shift;
      set_word(e >> 1, (word(e >> 1) & ~(0xffffu << shift)) | bits);
    }
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
