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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

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

template <int kVec>
struct VecOf;
template <>
struct VecOf<1> {
  using T = float;
};
template <>
struct VecOf<4> {
  using T = float4;
};

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
template <int kVec>
__global__ void forward_stats_kernel(const float* x, double* partials, BatchNormArgs a, int64_t cols, int64_t n,
                                     int64_t len) {
  using V = typename VecOf<kVec>::T;
  const int64_t c = blockIdx.x;
  const float shift = x[c * a.inner];
  const V* xv = reinterpret_cast<const V*>(x);
  float s = 0, q = 0;
  for_chunk(a, cols, n, len, [&](int64_t i) {
    if constexpr (kVec == 4) {
      float4 v = xv[i];
      v.x -= shift, v.y -= shift, v.z -= shift, v.w -= shift;
      s += (v.x + v.y) + (v.z + v.w);
      q += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
    } else {
      float v = xv[i] - shift;
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
__global__ void forward_finalize_kernel(const float* x, const double* partials, int64_t chunks, float* moving_mean,
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
    const float shift = x[c * a.inner];
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
template <int kVec>
__global__ void forward_apply_kernel(const float* x, const float* gamma, const float* beta, const float* mean,
                                     const float* var, float* y, BatchNormArgs a, int64_t cols, int64_t n,
                                     int64_t len) {
  using V = typename VecOf<kVec>::T;
  const int64_t c = blockIdx.x;
  const float scale = (a.fix_gamma ? 1.0f : gamma[c]) / sqrtf(var[c] + a.eps);
  const float offset = beta[c] - mean[c] * scale;
  const V* xv = reinterpret_cast<const V*>(x);
  V* yv = reinterpret_cast<V*>(y);
  for_chunk(a, cols, n, len, [&](int64_t i) {
    if constexpr (kVec == 4) {
      float4 v = xv[i];
      yv[i] = make_float4(v.x * scale + offset, v.y * scale + offset, v.z * scale + offset, v.w * scale + offset);
    } else {
      yv[i] = xv[i] * scale + offset;
    }
  });
}

// ---- backward
//   xc = x - mean; d_beta = sum(dy); d_gamma = sum(dy * xc) * inv_std;
//   train:   dx = gamma * inv_std * (dy - sum(dy) / n - xc * inv_std^2 * sum(dy * xc) / n)
//   predict: dx = gamma * inv_std * dy

// partials[c][chunk] = (sum(dy), sum(dy * (x - mean))).
template <int kVec>
__global__ void backward_sums_kernel(const float* dy, const float* x, const float* mean, double* partials,
                                     BatchNormArgs a, int64_t cols, int64_t n, int64_t len) {
  using V = typename VecOf<kVec>::T;
  const int64_t c = blockIdx.x;
  const float mu = mean[c];
  const V* gv = reinterpret_cast<const V*>(dy);
  const V* xv = reinterpret_cast<const V*>(x);
  float s = 0, t = 0;
  for_chunk(a, cols, n, len, [&](int64_t i) {
    if constexpr (kVec == 4) {
      float4 g = gv[i], v = xv[i];
      s += (g.x + g.y) + (g.z + g.w);
      t += (g.x * (v.x - mu) + g.y * (v.y - mu)) + (g.z * (v.z - mu) + g.w * (v.w - mu));
    } else {
      float g = gv[i];
      s += g;
      t += g * (xv[i] - mu);
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

template <int kVec>
__global__ void backward_apply_kernel(const float* dy, const float* x, const float4* coef, float* dx, BatchNormArgs a,
                                      int64_t cols, int64_t n, int64_t len) {
  using V = typename VecOf<kVec>::T;
  const float4 cf = coef[blockIdx.x];
  const float k = cf.x, mean_dy = cf.y, co = cf.z, mu = cf.w;
  const V* gv = reinterpret_cast<const V*>(dy);
  const V* xv = reinterpret_cast<const V*>(x);
  V* ov = reinterpret_cast<V*>(dx);
  for_chunk(a, cols, n, len, [&](int64_t i) {
    if constexpr (kVec == 4) {
      float4 g = gv[i], v = xv[i];
      ov[i] = make_float4(k * (g.x - mean_dy - (v.x - mu) * co), k * (g.y - mean_dy - (v.y - mu) * co),
                          k * (g.z - mean_dy - (v.z - mu) * co), k * (g.w - mean_dy - (v.w - mu) * co));
    } else {
      ov[i] = k * (gv[i] - mean_dy - (xv[i] - mu) * co);
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

cudaError_t launch_batch_norm_forward(const float* x, const float* gamma, const float* beta, float* moving_mean,
                                      float* moving_var, float* y, float* mean, float* var, const BatchNormArgs& a,
                                      void* workspace, cudaStream_t s) {
  if (a.channels == 0) return cudaSuccess;
  const bool vec4 = a.inner % 4 == 0 && aligned16(x) && aligned16(y);
  const Plan p = make_plan(a, vec4);
  double* partials = partials_of(workspace, a);
  const dim3 grid = chunk_grid(a, p);
  if (a.train && p.n > 0) {
    if (vec4)
      forward_stats_kernel<4><<<grid, kThreads, 0, s>>>(x, partials, a, p.cols, p.n, p.split.len);
    else
      forward_stats_kernel<1><<<grid, kThreads, 0, s>>>(x, partials, a, p.cols, p.n, p.split.len);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  forward_finalize_kernel<<<finalize_blocks(a), kThreads, 0, s>>>(x, partials, p.split.chunks, moving_mean, moving_var,
                                                                  mean, var, a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (p.n > 0) {
    if (vec4)
      forward_apply_kernel<4><<<grid, kThreads, 0, s>>>(x, gamma, beta, mean, var, y, a, p.cols, p.n, p.split.len);
    else
      forward_apply_kernel<1><<<grid, kThreads, 0, s>>>(x, gamma, beta, mean, var, y, a, p.cols, p.n, p.split.len);
  }
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean,
                                       const float* var, float* dx, float* d_gamma, float* d_beta,
                                       const BatchNormArgs& a, void* workspace, cudaStream_t s) {
  if (a.channels == 0) return cudaSuccess;
  const bool vec4 = a.inner % 4 == 0 && aligned16(dy) && aligned16(x) && aligned16(dx);
  const Plan p = make_plan(a, vec4);
  double* partials = partials_of(workspace, a);
  float4* coef = coef_of(workspace);
  const dim3 grid = chunk_grid(a, p);
  if (p.n > 0) {
    if (vec4)
      backward_sums_kernel<4><<<grid, kThreads, 0, s>>>(dy, x, mean, partials, a, p.cols, p.n, p.split.len);
    else
      backward_sums_kernel<1><<<grid, kThreads, 0, s>>>(dy, x, mean, partials, a, p.cols, p.n, p.split.len);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  backward_finalize_kernel<<<finalize_blocks(a), kThreads, 0, s>>>(gamma, mean, var, partials, p.split.chunks, d_gamma,
                                                                   d_beta, coef, a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (p.n > 0) {
    if (vec4)
      backward_apply_kernel<4><<<grid, kThreads, 0, s>>>(dy, x, coef, dx, a, p.cols, p.n, p.split.len);
    else
      backward_apply_kernel<1><<<grid, kThreads, 0, s>>>(dy, x, coef, dx, a, p.cols, p.n, p.split.len);
  }
  return cudaGetLastError();
}

}  // namespace kiln::cuda
