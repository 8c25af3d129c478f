// CPU kernels of BatchNorm and _backward_BatchNorm: direct loops, over
// float32, bfloat16 or float16 data (16-bit values are loaded into float32;
// scale, shift and statistics are float32).
//
// Data of any rank is viewed as [outer, channels, inner] around the channel
// axis, so every axis works without copies; work is split over channels.
// Train mode (KernelContext::is_train and not use_global_stats) normalizes
// with the batch statistics (biased variance, as MXNet), writes them to
// outputs 1 and 2, and then updates moving_mean/moving_var in place (inputs 3
// and 4, which the op declares as mutated). Predict mode normalizes with the
// moving statistics and copies them to outputs 1 and 2, so the backward op
// always finds the statistics the forward used in its (mean, var) inputs and
// only needs the mode, which it reads from its own call's is_train.
// fix_gamma uses a scale of ones; d_gamma is 0.
//
// (These replaced oneDNN's batch normalization primitives: on plain NCHW
// data oneDNN 2.6 takes a slow path, 50-100x this loop for ResNet-18's
// 256x64x28x28 activations.) Sums run per row of `inner` elements in float
// and across rows in double; the variance sums deviations from the channel's
// first element, which keeps E[x^2] - E[x]^2 from cancelling when the mean is
// large against the spread.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/conv.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

struct NormDims {
  int64_t outer = 1, channels = 1, inner = 1;
  bool train = false;
  float eps = 0;
  int threads = 1;
  int64_t grain = 1;  // channels per thread at least
};

NormDims norm_dims(const KernelContext& ctx, const BatchNormAttrs& a, const Shape& data) {
  BatchNormDims d = batch_norm_dims(a, data);
  NormDims n{d.outer, d.channels, d.inner, ctx.is_train && !a.use_global_stats, static_cast<float>(a.eps),
             ctx.run.num_threads};
  n.grain = std::max<int64_t>(1, cpu::kDefaultGrain / std::max<int64_t>(n.outer * n.inner, 1));
  return n;
}

// Channel c's elements: rows x + (o * channels + c) * inner, o < outer.
template <typename F>
void for_rows(const NormDims& d, int64_t c, F&& f) {
  for (int64_t o = 0; o < d.outer; ++o) f((o * d.channels + c) * d.inner);
}

// Batch mean and biased variance of channel c.
template <typename T>
void channel_stats(const NormDims& d, const T* x, int64_t c, float* mean, float* var) {
  const float shift = cpu::load(x[c * d.inner]);
  double sum = 0, sum_sq = 0;
  for_rows(d, c, [&](int64_t r) {
    const T* xr = x + r;
    float s = 0, q = 0;
#pragma omp simd reduction(+ : s, q)
    for (int64_t i = 0; i < d.inner; ++i) {
      const float v = cpu::load(xr[i]) - shift;
      s += v;
      q += v * v;
    }
    sum += s;
    sum_sq += q;
  });
  const double n = static_cast<double>(d.outer * d.inner);
  const double m = sum / n;
  *mean = static_cast<float>(shift + m);
  *var = static_cast<float>(std::max(0.0, sum_sq / n - m * m));
}

// (data, gamma, beta, moving_mean, moving_var) -> (out, mean, var); data and
// out in T (float32 or a 16-bit float), the rest float32.
template <typename T>
void batch_norm_forward_typed(const KernelContext& ctx, std::span<const TensorView> in,
                              std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<BatchNormAttrs>();
  const NormDims d = norm_dims(ctx, a, in[0].shape);
  const T* x = in[0].ptr<T>();
  const float* gamma = in[1].ptr<float>();
  const float* beta = in[2].ptr<float>();
  float* moving_mean = in[3].ptr<float>();
  float* moving_var = in[4].ptr<float>();
  T* y = out[0].ptr<T>();
  float* mean = out[1].ptr<float>();
  float* var = out[2].ptr<float>();
  const bool empty = in[0].size() == 0;
  cpu::parallel_for(
      d.threads, d.channels,
      [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          if (!d.train) {
            mean[c] = moving_mean[c];
            var[c] = moving_var[c];
          } else if (empty) {  // statistics of an empty batch
            mean[c] = var[c] = 0.0f;
          } else {
            channel_stats(d, x, c, &mean[c], &var[c]);
          }
          if (empty) continue;
          const float scale = (a.fix_gamma ? 1.0f : gamma[c]) / std::sqrt(var[c] + d.eps);
          const float offset = beta[c] - mean[c] * scale;
          for_rows(d, c, [&](int64_t r) {
            const T* xr = x + r;
            T* yr = y + r;
#pragma omp simd
            for (int64_t i = 0; i < d.inner; ++i) yr[i] = cpu::store<T>(cpu::load(xr[i]) * scale + offset);
          });
        }
      },
      d.grain);
  if (d.train) {
    const float m = a.momentum;
    for (int64_t c = 0; c < d.channels; ++c) {
      moving_mean[c] = moving_mean[c] * m + mean[c] * (1 - m);
      moving_var[c] = moving_var[c] * m + var[c] * (1 - m);
    }
  }
}

// (out_grad, data, gamma, mean, var) -> (d_data, d_gamma, d_beta)
//   xhat = (x - mean) * inv_std; d_beta = sum(dy); d_gamma = sum(dy * xhat);
//   train:   dx = gamma * inv_std * (dy - d_beta / n - xhat * d_gamma / n)
//   predict: dx = gamma * inv_std * dy (the statistics are constants)
template <typename T>
void batch_norm_backward_typed(const KernelContext& ctx, std::span<const TensorView> in,
                               std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<BatchNormAttrs>();
  const NormDims d = norm_dims(ctx, a, in[1].shape);
  const T* dy = in[0].ptr<T>();
  const T* x = in[1].ptr<T>();
  const float* gamma = in[2].ptr<float>();
  const float* mean = in[3].ptr<float>();
  const float* var = in[4].ptr<float>();
  T* dx = out[0].ptr<T>();
  float* d_gamma = out[1].ptr<float>();
  float* d_beta = out[2].ptr<float>();
  const double n = static_cast<double>(d.outer * d.inner);
  cpu::parallel_for(
      d.threads, d.channels,
      [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          const float mu = mean[c];
          const float inv_std = 1.0f / std::sqrt(var[c] + d.eps);
          double sum_dy = 0, sum_dy_xc = 0;  // xc = x - mean
          for_rows(d, c, [&](int64_t r) {
            const T* g = dy + r;
            const T* xr = x + r;
            float s = 0, t = 0;
#pragma omp simd reduction(+ : s, t)
            for (int64_t i = 0; i < d.inner; ++i) {
              const float gi = cpu::load(g[i]);
              s += gi;
              t += gi * (cpu::load(xr[i]) - mu);
            }
            sum_dy += s;
            sum_dy_xc += t;
          });
          const float g_c = a.fix_gamma ? 1.0f : gamma[c];
          d_beta[c] = static_cast<float>(sum_dy);
          d_gamma[c] = a.fix_gamma ? 0.0f : static_cast<float>(sum_dy_xc * inv_std);
          const float k = g_c * inv_std;
          // dx = k * dy - k * (mean(dy) + (x - mu) * inv_std^2 * mean(dy * (x - mu)))
          const float mean_dy = d.train && n > 0 ? static_cast<float>(sum_dy / n) : 0.0f;
          const float coef = d.train && n > 0 ? static_cast<float>(sum_dy_xc / n) * inv_std * inv_std : 0.0f;
          for_rows(d, c, [&](int64_t r) {
            const T* g = dy + r;
            const T* xr = x + r;
            T* o = dx + r;
#pragma omp simd
            for (int64_t i = 0; i < d.inner; ++i)
              o[i] = cpu::store<T>(k * (cpu::load(g[i]) - mean_dy - (cpu::load(xr[i]) - mu) * coef));
          });
        }
      },
      d.grain);
}

void batch_norm_forward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  switch (in[0].dtype) {
    case DType::kBfloat16:
      return batch_norm_forward_typed<BFloat16>(ctx, in, out);
    case DType::kFloat16:
      return batch_norm_forward_typed<Half>(ctx, in, out);
    default:
      return batch_norm_forward_typed<float>(ctx, in, out);
  }
}

void batch_norm_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  switch (in[1].dtype) {
    case DType::kBfloat16:
      return batch_norm_backward_typed<BFloat16>(ctx, in, out);
    case DType::kFloat16:
      return batch_norm_backward_typed<Half>(ctx, in, out);
    default:
      return batch_norm_backward_typed<float>(ctx, in, out);
  }
}

}  // namespace

void register_cpu_batch_norm_kernels() {
  register_kernel(OpId::kBatchNorm, DeviceKind::kCPU, batch_norm_forward, HalfSupport::kAny);
  register_kernel(OpId::kBatchNormBackward, DeviceKind::kCPU, batch_norm_backward, HalfSupport::kAny);
}

}  // namespace kiln
