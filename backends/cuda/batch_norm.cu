// BatchNorm forward and backward: one block per channel. Statistics are
// summed per thread in float around the channel's first element (as the CPU
// kernel does, so E[x^2] - E[x]^2 does not cancel) and across threads in
// double. Kiln's own kernels rather than cuDNN's: cuDNN updates the moving
// variance with the unbiased batch variance and returns the inverse standard
// deviation, where Kiln (as MXNet) uses and returns the biased variance.
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t element(const BatchNormArgs& a, int64_t c, int64_t k) {
  return ((k / a.inner) * a.channels + c) * a.inner + k % a.inner;
}

// Sums two per-thread values over the block (in double); every thread gets the totals.
__device__ void block_sum2(double& s, double& q) {
  __shared__ double ss[kThreads], qq[kThreads];
  ss[threadIdx.x] = s;
  qq[threadIdx.x] = q;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      ss[threadIdx.x] += ss[threadIdx.x + half];
      qq[threadIdx.x] += qq[threadIdx.x + half];
    }
    __syncthreads();
  }
  s = ss[0];
  q = qq[0];
  __syncthreads();
}

__global__ void forward_kernel(const float* x, const float* gamma, const float* beta, float* moving_mean,
                               float* moving_var, float* y, float* mean_out, float* var_out, BatchNormArgs a) {
  const int64_t c = blockIdx.x;
  const int64_t n = a.outer * a.inner;
  float mean, var;
  if (!a.train) {
    mean = moving_mean[c];
    var = moving_var[c];
  } else if (n == 0) {
    mean = var = 0.0f;
  } else {
    const float shift = x[element(a, c, 0)];
    float s = 0, q = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      float v = x[element(a, c, k)] - shift;
      s += v;
      q += v * v;
    }
    double ds = s, dq = q;
    block_sum2(ds, dq);
    double m = ds / static_cast<double>(n);
    mean = static_cast<float>(shift + m);
    var = static_cast<float>(fmax(0.0, dq / static_cast<double>(n) - m * m));
  }
  if (threadIdx.x == 0) {
    mean_out[c] = mean;
    var_out[c] = var;
    if (a.train) {
      moving_mean[c] = moving_mean[c] * a.momentum + mean * (1 - a.momentum);
      moving_var[c] = moving_var[c] * a.momentum + var * (1 - a.momentum);
    }
  }
  const float scale = (a.fix_gamma ? 1.0f : gamma[c]) / sqrtf(var + a.eps);
  const float offset = beta[c] - mean * scale;
  __syncthreads();  // every thread has read x for the statistics before y (which may be x) is written
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    int64_t i = element(a, c, k);
    y[i] = x[i] * scale + offset;
  }
}

__global__ void backward_kernel(const float* dy, const float* x, const float* gamma, const float* mean_in,
                                const float* var_in, float* dx, float* d_gamma, float* d_beta, BatchNormArgs a) {
  const int64_t c = blockIdx.x;
  const int64_t n = a.outer * a.inner;
  const float mu = mean_in[c];
  const float inv_std = 1.0f / sqrtf(var_in[c] + a.eps);
  float s = 0, t = 0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    int64_t i = element(a, c, k);
    s += dy[i];
    t += dy[i] * (x[i] - mu);
  }
  double sum_dy = s, sum_dy_xc = t;
  block_sum2(sum_dy, sum_dy_xc);
  const float g_c = a.fix_gamma ? 1.0f : gamma[c];
  if (threadIdx.x == 0) {
    d_beta[c] = static_cast<float>(sum_dy);
    d_gamma[c] = a.fix_gamma ? 0.0f : static_cast<float>(sum_dy_xc * inv_std);
  }
  const float k_c = g_c * inv_std;
  const float mean_dy = a.train && n > 0 ? static_cast<float>(sum_dy / n) : 0.0f;
  const float coef = a.train && n > 0 ? static_cast<float>(sum_dy_xc / n) * inv_std * inv_std : 0.0f;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    int64_t i = element(a, c, k);
    dx[i] = k_c * (dy[i] - mean_dy - (x[i] - mu) * coef);
  }
}

}  // namespace

cudaError_t launch_batch_norm_forward(const float* x, const float* gamma, const float* beta, float* moving_mean,
                                      float* moving_var, float* y, float* mean, float* var, const BatchNormArgs& a,
                                      cudaStream_t s) {
  if (a.channels == 0) return cudaSuccess;
  forward_kernel<<<static_cast<unsigned>(a.channels), kThreads, 0, s>>>(x, gamma, beta, moving_mean, moving_var, y,
                                                                        mean, var, a);
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean,
                                       const float* var, float* dx, float* d_gamma, float* d_beta,
                                       const BatchNormArgs& a, cudaStream_t s) {
  if (a.channels == 0) return cudaSuccess;
  backward_kernel<<<static_cast<unsigned>(a.channels), kThreads, 0, s>>>(dy, x, gamma, mean, var, dx, d_gamma, d_beta,
                                                                         a);
  return cudaGetLastError();
}

}  // namespace kiln::cuda
