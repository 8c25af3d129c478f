// BatchNorm forward and backward, each pass spread over the whole GPU.
//
// A channel's n = outer * inner elements (rows of `inner` at stride
// channels * inner) are split into `chunks` contiguous ranges; a grid of
// (channel, chunk) blocks writes per-chunk partial sums in double to the
// workspace, a finalize kernel (one warp per channel) adds a channel's
// partials and computes its statistics or coefficients, and an elementwise
// pass over the same (channel, chunk) grid writes the output. Loads are
// float4 when inner % 4 == 0 and the tensors are 16-byte aligned.
//
// float16/bfloat16 data is loaded into float32 and rounded once per output
// element; gamma, beta and the statistics are float32 (mixed precision's rule).
//
// Numerics as the CPU kernel (backends/cpu/conv_batch_norm.cc): the forward
// sums deviations from the channel's first element (so E[x^2] - E[x]^2 does
// not cancel), per thread in float over a few elements, then in double.
// Kiln's own kernels rather than cuDNN's: cuDNN updates the moving variance
// with the unbiased batch variance and returns the inverse standard
// deviation, where Kiln (as MXNet) uses and returns the biased variance.
//
// Aliasing: y may be x and dx may be dy; every pass that writes runs after
// the passes that read for the statistics (stream order), and reads an
// element before writing the same element.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "backends/cuda/kernels.h"
#include "backends/cuda/row_walk.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kTargetBlocks = 2048;         // a few waves of 256 threads on 132 SMs
constexpr int64_t kMinPerBlock = 4 * kThreads;  // vector items per (channel, chunk) block

// The layout of one pass in vector items of `vec` floats.
struct Plan {
  int vec = 1;
  int64_t cols = 1;  // inner / vec
  int64_t n = 0;     // outer * cols: one channel's items
  ChunkSplit split;
};

Plan make_plan(const BatchNormArgs& a, bool vec4) {
  Plan p;
  p.vec = vec4 ? 4 : 1;
  p.cols = a.inner / p.vec;
  p.n = a.outer * p.cols;
  int64_t per_channel = (kTargetBlocks + a.channels - 1) / a.channels;
  p.split = split_chunks(p.n, per_channel < 65535 ? per_channel : 65535, kMinPerBlock);
  return p;
}

// The workspace: the backward's coefficients, float4[channels], then the
// partial sums, double[channels][chunks][2].
size_t partials_bytes(const BatchNormArgs& a, const Plan& p) {
  return static_cast<size_t>(a.channels * p.split.chunks) * 2 * sizeof(double);
}
float4* coef_of(void* workspace) { return static_cast<float4*>(workspace); }
double* partials_of(void* workspace, const BatchNormArgs& a) {
  return reinterpret_cast<double*>(static_cast<char*>(workspace) + static_cast<size_t>(a.channels) * sizeof(float4));
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

// Sums (s, q) over the block into thread 0's (s, q).
__device__ __forceinline__ void block_sum2(double& s, double& q) {
  __shared__ double ss[kWarps], qq[kWarps];
  s = warp_sum(s);
  q = warp_sum(q);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    ss[warp] = s;
    qq[warp] = q;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      s += ss[w];
      q += qq[w];
    }
  }
}

// Loads and stores of the data arrays (x, y, dy, dx) in their storage type
// T (float, __half or __nv_bfloat16), in float32; item i of a kVec plan is
// elements [i * kVec, i * kVec + kVec). Statistics, scale and shift stay float32.
template <typename T, int kVec>
struct Io;
template <typename T>
struct Io<T, 1> {
  using V = float;
  static __device__ __forceinline__ float load(const T* p, int64_t i) { return static_cast<float>(p[i]); }
  static __device__ __forceinline__ void store(T* p, int64_t i, float v) { p[i] = static_cast<T>(v); }
};
template <>
struct Io<float, 4> {
  using V = float4;
  static __device__ __forceinline__ float4 load(const float* p, int64_t i) {
    return reinterpret_cast<const float4*>(p)[i];
  }
  static __device__ __forceinline__ void store(float* p, int64_t i, float4 v) { reinterpret_cast<float4*>(p)[i] = v; }
};
template <typename H2, typename T>
struct Io16x4 {  // four 16-bit values as one 8-byte load
  using V = float4;
  static __device__ __forceinline__ float4 load(const T* p, int64_t i) {
    uint2 raw = reinterpret_cast<const uint2*>(p)[i];
    float2 a = to_float2(*reinterpret_cast<const H2*>(&raw.x)), b = to_float2(*reinterpret_cast<const H2*>(&raw.y));
    return make_float4(a.x, a.y, b.x, b.y);
  }
  static __device__ __forceinline__ void store(T* p, int64_t i, float4 v) {
    H2 a = from_float2(make_float2(v.x, v.y)), b = from_float2(make_float2(v.z, v.w));
    uint2 raw;
    raw.x = *reinterpret_cast<const unsigned*>(&a);
    raw.y = *reinterpret_cast<const unsigned*>(&b);
    reinterpret_cast<uint2*>(p)[i] = raw;
  }
  static __device__ __forceinline__ float2 to_float2(__half2 h) { return __half22float2(h); }
  static __device__ __forceinline__ float2 to_float2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
  static __device__ __forceinline__ H2 from_float2(float2 f) {
    if constexpr (std::is_same_v<H2, __half2>) {
      return __float22half2_rn(f);
    } else {
      return __float22bfloat162_rn(f);
    }
  }
};
template <>
struct Io<__half, 4> : Io16x4<__half2, __half> {};
template <>
struct Io<__nv_bfloat16, 4> : Io16x4<__nv_bfloat162, __nv_bfloat16> {};

// Walks chunk blockIdx.y of channel blockIdx.x in vector items; f(offset in items).
template <typename F>
__device__ __forceinline__ void for_chunk(const BatchNormArgs& a, int64_t cols, int64_t n, int64_t len, F&& f) {
  const int64_t c = blockIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * len;
  const int64_t end = begin + len < n ? begin + len : n;
  for_each_in_range(begin, end, cols, a.channels * cols, 1, c * cols, f);
}

// ---- forward

// partials[c][chunk] = (sum(x - shift), sum((x - shift)^2)), shift = the channel's first element.
template <typename T, int kVec>
__global__ void forward_stats_kernel(const T* x, double* partials, BatchNormArgs a, int64_t cols, int64_t n,
                                     int64_t len) {
  using IO = Io<T, kVec>;
  const int64_t c = blockIdx.x;
  const float shift = static_cast<float>(x[c * a.inner]);
  float s = 0, q = 0;
  for_chunk(a, cols, n, len, [&](int64_t i) {
    if constexpr (kVec == 4) {
      float4 v = IO::load(x, i);
      v.x -= shift, v.y -= shift, v.z -= shift, v.w -= shift;
      s += (v.x + v.y) + (v.z + v.w);
      q += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
    } else {
      float v = IO::load(x, i) - shift;
      s += v;
      q += v * v;
    }
  });
  double ds = s, dq = q;
  block_sum2(ds, dq);
  if (threadIdx.x == 0) {
    double* p = partials + (c * gridDim.y + blockIdx.y) * 2;
    p[0] = ds;
    p[1] = dq;
  }
}

// One warp per channel: the statistics (batch or moving), the outputs mean
// and var, the moving statistics' update.
template <typename T>
__global__ void forward_finalize_kernel(const T* x, const double* partials, int64_t chunks, float* moving_mean,
                                        float* moving_var, float* mean_out, float* var_out, BatchNormArgs a) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= a.channels) return;
  const int64_t n = a.outer * a.inner;
  float mean, var;
  if (!a.train) {
    mean = moving_mean[c];
    var = moving_var[c];
  } else if (n == 0) {
    mean = var = 0.0f;
  } else {
    double s = 0, q = 0;
    for (int64_t j = lane; j < chunks; j += 32) {
      s += partials[(c * chunks + j) * 2];
      q += partials[(c * chunks + j) * 2 + 1];
    }
    s = warp_sum(s);
    q = warp_sum(q);
    const float shift = static_cast<float>(x[c * a.inner]);
    const double m = s / static_cast<double>(n);
    mean = static_cast<float>(shift + m);
    var = static_cast<float>(fmax(0.0, q / static_cast<double>(n) - m * m));
  }
  if (lane == 0) {
    mean_out[c] = mean;
    var_out[c] = var;
    if (a.train) {
      moving_mean[c] = moving_mean[c] * a.momentum + mean * (1 - a.momentum);
      moving_var[c] = moving_var[c] * a.momentum + var * (1 - a.momentum);
    }
  }
}

// y = x * scale + offset with the channel's statistics from the finalize kernel.
template <typename T, int kVec>
__global__ void forward_apply_kernel(const T* x, const float* gamma, const float* beta, const float* mean,
                                     const float* var, T* y, BatchNormArgs a, int64_t cols, int64_t n, int64_t len) {
  using IO = Io<T, kVec>;
  const int64_t c = blockIdx.x;
  const float scale = (a.fix_gamma ? 1.0f : gamma[c]) / sqrtf(var[c] + a.eps);
  const float offset = beta[c] - mean[c] * scale;
  for_chunk(a, cols, n, len, [&](int64_t i) {
    if constexpr (kVec == 4) {
      float4 v = IO::load(x, i);
      IO::store(y, i, make_float4(v.x * scale + offset, v.y * scale + offset, v.z * scale + offset,
                                  v.w * scale + offset));
    } else {
      IO::store(y, i, IO::load(x, i) * scale + offset);
    }
  });
}

// ---- backward
//   xc = x - mean; d_beta = sum(dy); d_gamma = sum(dy * xc) * inv_std;
//   train:   dx = gamma * inv_std * (dy - sum(dy) / n - xc * inv_std^2 * sum(dy * xc) / n)
//   predict: dx = gamma * inv_std * dy

// partials[c][chunk] = (sum(dy), sum(dy * (x - mean))).
template <typename T, int kVec>
__global__ void backward_sums_kernel(const T* dy, const T* x, const float* mean, double* partials, BatchNormArgs a,
                                     int64_t cols, int64_t n, int64_t len) {
  using IO = Io<T, kVec>;
  const int64_t c = blockIdx.x;
  const float mu = mean[c];
  float s = 0, t = 0;
  for_chunk(a, cols, n, len, [&](int64_t i) {
    if constexpr (kVec == 4) {
      float4 g = IO::load(dy, i), v = IO::load(x, i);
      s += (g.x + g.y) + (g.z + g.w);
      t += (g.x * (v.x - mu) + g.y * (v.y - mu)) + (g.z * (v.z - mu) + g.w * (v.w - mu));
    } else {
      float g = IO::load(dy, i);
      s += g;
      t += g * (IO::load(x, i) - mu);
    }
  });
  double ds = s, dt = t;
  block_sum2(ds, dt);
  if (threadIdx.x == 0) {
    double* p = partials + (c * gridDim.y + blockIdx.y) * 2;
    p[0] = ds;
    p[1] = dt;
  }
}

// One warp per channel: d_gamma, d_beta, and coef[c] = (k, mean_dy, coef, mu) for the dx pass.
__global__ void backward_finalize_kernel(const float* gamma, const float* mean, const float* var,
                                         const double* partials, int64_t chunks, float* d_gamma, float* d_beta,
                                         float4* coef, BatchNormArgs a) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= a.channels) return;
  const int64_t n = a.outer * a.inner;
  double sum_dy = 0, sum_dy_xc = 0;
  if (n > 0) {
    for (int64_t j = lane; j < chunks; j += 32) {
      sum_dy += partials[(c * chunks + j) * 2];
      sum_dy_xc += partials[(c * chunks + j) * 2 + 1];
    }
    sum_dy = warp_sum(sum_dy);
    sum_dy_xc = warp_sum(sum_dy_xc);
  }
  if (lane != 0) return;
  const float inv_std = 1.0f / sqrtf(var[c] + a.eps);
  const float g_c = a.fix_gamma ? 1.0f : gamma[c];
  d_beta[c] = static_cast<float>(sum_dy);
  d_gamma[c] = a.fix_gamma ? 0.0f : static_cast<float>(sum_dy_xc * inv_std);
  const float mean_dy = a.train && n > 0 ? static_cast<float>(sum_dy / n) : 0.0f;
  const float k = a.train && n > 0 ? static_cast<float>(sum_dy_xc / n) * inv_std * inv_std : 0.0f;
  coef[c] = make_float4(g_c * inv_std, mean_dy, k, mean[c]);
}

template <typename T, int kVec>
__global__ void backward_apply_kernel(const T* dy, const T* x, const float4* coef, T* dx, BatchNormArgs a, int64_t cols,
                                      int64_t n, int64_t len) {
  using IO = Io<T, kVec>;
  const float4 cf = coef[blockIdx.x];
  const float k = cf.x, mean_dy = cf.y, co = cf.z, mu = cf.w;
  for_chunk(a, cols, n, len, [&](int64_t i) {
    if constexpr (kVec == 4) {
      float4 g = IO::load(dy, i), v = IO::load(x, i);
      IO::store(dx, i,
                make_float4(k * (g.x - mean_dy - (v.x - mu) * co), k * (g.y - mean_dy - (v.y - mu) * co),
                            k * (g.z - mean_dy - (v.z - mu) * co), k * (g.w - mean_dy - (v.w - mu) * co)));
    } else {
      IO::store(dx, i, k * (IO::load(dy, i) - mean_dy - (IO::load(x, i) - mu) * co));
    }
  });
}

dim3 chunk_grid(const BatchNormArgs& a, const Plan& p) {
  return dim3(static_cast<unsigned>(a.channels), static_cast<unsigned>(p.split.chunks));
}
unsigned finalize_blocks(const BatchNormArgs& a) { return static_cast<unsigned>((a.channels + kWarps - 1) / kWarps); }

}  // namespace

size_t batch_norm_workspace_bytes(const BatchNormArgs& a) {
  // Either plan (the pointers' alignment picks one at launch).
  size_t scalar = partials_bytes(a, make_plan(a, false)), vec = partials_bytes(a, make_plan(a, true));
  return static_cast<size_t>(a.channels) * sizeof(float4) + (scalar > vec ? scalar : vec);
}

namespace {

bool aligned(const void* p, size_t bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

template <typename T>
cudaError_t forward_typed(const T* x, const float* gamma, const float* beta, float* moving_mean, float* moving_var,
                          T* y, float* mean, float* var, const BatchNormArgs& a, void* workspace, cudaStream_t s) {
  const bool vec4 = a.inner % 4 == 0 && aligned(x, 4 * sizeof(T)) && aligned(y, 4 * sizeof(T));
  const Plan p = make_plan(a, vec4);
  double* partials = partials_of(workspace, a);
  const dim3 grid = chunk_grid(a, p);
  if (a.train && p.n > 0) {
    if (vec4)
      forward_stats_kernel<T, 4><<<grid, kThreads, 0, s>>>(x, partials, a, p.cols, p.n, p.split.len);
    else
      forward_stats_kernel<T, 1><<<grid, kThreads, 0, s>>>(x, partials, a, p.cols, p.n, p.split.len);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  forward_finalize_kernel<T><<<finalize_blocks(a), kThreads, 0, s>>>(x, partials, p.split.chunks, moving_mean,
                                                                     moving_var, mean, var, a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (p.n > 0) {
    if (vec4)
      forward_apply_kernel<T, 4><<<grid, kThreads, 0, s>>>(x, gamma, beta, mean, var, y, a, p.cols, p.n, p.split.len);
    else
      forward_apply_kernel<T, 1><<<grid, kThreads, 0, s>>>(x, gamma, beta, mean, var, y, a, p.cols, p.n, p.split.len);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t backward_typed(const T* dy, const T* x, const float* gamma, const float* mean, const float* var, T* dx,
                           float* d_gamma, float* d_beta, const BatchNormArgs& a, void* workspace, cudaStream_t s) {
  const bool vec4 =
      a.inner % 4 == 0 && aligned(dy, 4 * sizeof(T)) && aligned(x, 4 * sizeof(T)) && aligned(dx, 4 * sizeof(T));
  const Plan p = make_plan(a, vec4);
  double* partials = partials_of(workspace, a);
  float4* coef = coef_of(workspace);
  const dim3 grid = chunk_grid(a, p);
  if (p.n > 0) {
    if (vec4)
      backward_sums_kernel<T, 4><<<grid, kThreads, 0, s>>>(dy, x, mean, partials, a, p.cols, p.n, p.split.len);
    else
      backward_sums_kernel<T, 1><<<grid, kThreads, 0, s>>>(dy, x, mean, partials, a, p.cols, p.n, p.split.len);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  backward_finalize_kernel<<<finalize_blocks(a), kThreads, 0, s>>>(gamma, mean, var, partials, p.split.chunks, d_gamma,
                                                                   d_beta, coef, a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (p.n > 0) {
    if (vec4)
      backward_apply_kernel<T, 4><<<grid, kThreads, 0, s>>>(dy, x, coef, dx, a, p.cols, p.n, p.split.len);
    else
      backward_apply_kernel<T, 1><<<grid, kThreads, 0, s>>>(dy, x, coef, dx, a, p.cols, p.n, p.split.len);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_batch_norm_forward(const void* x, const float* gamma, const float* beta, float* moving_mean,
                                      float* moving_var, void* y, float* mean, float* var, int data_dtype,
                                      const BatchNormArgs& a, void* workspace, cudaStream_t s) {
  if (a.channels == 0) return cudaSuccess;
  switch (data_dtype) {
    case kDtypeFloat16:
      return forward_typed(static_cast<const __half*>(x), gamma, beta, moving_mean, moving_var, static_cast<__half*>(y),
                           mean, var, a, workspace, s);
    case kDtypeBfloat16:
      return forward_typed(static_cast<const __nv_bfloat16*>(x), gamma, beta, moving_mean, moving_var,
                           static_cast<__nv_bfloat16*>(y), mean, var, a, workspace, s);
    default:
      return forward_typed(static_cast<const float*>(x), gamma, beta, moving_mean, moving_var, static_cast<float*>(y),
                           mean, var, a, workspace, s);
  }
}

cudaError_t launch_batch_norm_backward(const void* dy, const void* x, const float* gamma, const float* mean,
                                       const float* var, void* dx, float* d_gamma, float* d_beta, int data_dtype,
                                       const BatchNormArgs& a, void* workspace, cudaStream_t s) {
  if (a.channels == 0) return cudaSuccess;
  switch (data_dtype) {
    case kDtypeFloat16:
      return backward_typed(static_cast<const __half*>(dy), static_cast<const __half*>(x), gamma, mean, var,
                            static_cast<__half*>(dx), d_gamma, d_beta, a, workspace, s);
    case kDtypeBfloat16:
      return backward_typed(static_cast<const __nv_bfloat16*>(dy), static_cast<const __nv_bfloat16*>(x), gamma, mean,
                            var, static_cast<__nv_bfloat16*>(dx), d_gamma, d_beta, a, workspace, s);
    default:
      return backward_typed(static_cast<const float*>(dy), static_cast<const float*>(x), gamma, mean, var,
                            static_cast<float*>(dx), d_gamma, d_beta, a, workspace, s);
  }
}

}  // namespace kiln::cuda
