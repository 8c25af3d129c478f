// CPU kernels of the optimizer family: each update is one vectorized pass
// over weight, grad and state, split over the device's threads (formulas:
// ir/ops/optimizer.h). The output is usually the weight itself (in place);
// every element is read before it is written, so that is safe. Clipping lets
// NaN through, as MXNet's does.
#include <cmath>

#include "backends/cpu/elemwise_math.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/optimizer.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

template <typename T>
inline T clip(T v, T bound) {
  return v > bound ? bound : (v < -bound ? -bound : v);
}

// Runs body(begin, end) over the elements, with kClip fixed at compile time so
// the loops carry no branch on it.
template <typename Body>
void run_update(const KernelContext& ctx, double clip_gradient, int64_t n, Body body) {
  if (clip_gradient >= 0) {
    cpu::parallel_for(ctx.run.num_threads, n, [&](int64_t b, int64_t e) { body(std::true_type{}, b, e); });
  } else {
    cpu::parallel_for(ctx.run.num_threads, n, [&](int64_t b, int64_t e) { body(std::false_type{}, b, e); });
  }
}

template <typename T>
void sgd(const KernelContext& ctx, std::span<const TensorView> in, const TensorView& out) {
  const auto& a = ctx.attrs.as<SgdAttrs>();
  const T* w = in[0].ptr<T>();
  const T* g = in[1].ptr<T>();
  T* y = out.ptr<T>();
  const T lr = a.lr, decay = T(1) - T(a.lr) * T(a.wd), rescale = a.rescale_grad, c = a.clip_gradient;
  run_update(ctx, a.clip_gradient, out.size(), [&](auto clip_on, int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      T d = rescale * g[i];
      if constexpr (decltype(clip_on)::value) d = clip(d, c);
      y[i] = decay * w[i] - lr * d;
    }
  });
}

template <typename T>
void sgd_mom(const KernelContext& ctx, std::span<const TensorView> in, const TensorView& out) {
  const auto& a = ctx.attrs.as<SgdMomAttrs>();
  const T* w = in[0].ptr<T>();
  const T* g = in[1].ptr<T>();
  T* mom = in[2].ptr<T>();
  T* y = out.ptr<T>();
  const T lr = a.lr, lr_wd = T(a.lr) * T(a.wd), momentum = a.momentum, rescale = a.rescale_grad, c = a.clip_gradient;
  run_update(ctx, a.clip_gradient, out.size(), [&](auto clip_on, int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      T d = rescale * g[i];
      if constexpr (decltype(clip_on)::value) d = clip(d, c);
      const T wi = w[i];
      const T m = momentum * mom[i] - lr_wd * wi - lr * d;
      mom[i] = m;
      y[i] = wi + m;
    }
  });
}

template <typename T>
void nag_mom(const KernelContext& ctx, std::span<const TensorView> in, const TensorView& out) {
  const auto& a = ctx.attrs.as<NagMomAttrs>();
  const T* w = in[0].ptr<T>();
  const T* g = in[1].ptr<T>();
  T* mom = in[2].ptr<T>();
  T* y = out.ptr<T>();
  const T lr = a.lr, wd = a.wd, momentum = a.momentum, rescale = a.rescale_grad, c = a.clip_gradient;
  run_update(ctx, a.clip_gradient, out.size(), [&](auto clip_on, int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      T d = rescale * g[i];
      if constexpr (decltype(clip_on)::value) d = clip(d, c);
      const T wi = w[i];
      const T step = lr * (d + wd * wi);
      const T m = momentum * mom[i] - step;
      mom[i] = m;
      y[i] = wi + momentum * m - step;
    }
  });
}

template <typename T>
void adam(const KernelContext& ctx, std::span<const TensorView> in, const TensorView& out) {
  const auto& a = ctx.attrs.as<AdamAttrs>();
  const T* w = in[0].ptr<T>();
  const T* g = in[1].ptr<T>();
  T* mean = in[2].ptr<T>();
  T* var = in[3].ptr<T>();
  T* y = out.ptr<T>();
  const T lr = a.lr, wd = a.wd, b1 = a.beta1, b2 = a.beta2, eps = a.epsilon, rescale = a.rescale_grad,
          c = a.clip_gradient;
  run_update(ctx, a.clip_gradient, out.size(), [&](auto clip_on, int64_t b, int64_t e) {
    int64_t i = b;
    if constexpr (std::is_same_v<T, float>) {
      // Eight lanes by hand: std::sqrt's errno path keeps GCC from vectorizing the loop.
      using cpu::VecF;
      for (; i + cpu::kVecWidth <= e; i += cpu::kVecWidth) {
        const VecF wi = cpu::load_vec(w + i);
        VecF d = rescale * cpu::load_vec(g + i) + wd * wi;
        if constexpr (decltype(clip_on)::value) d = d > c ? cpu::splat(c) : (d < -c ? cpu::splat(-c) : d);
        const VecF m = b1 * cpu::load_vec(mean + i) + (T(1) - b1) * d;
        const VecF v = b2 * cpu::load_vec(var + i) + (T(1) - b2) * d * d;
        cpu::store_vec(mean + i, m);
        cpu::store_vec(var + i, v);
        cpu::store_vec(y + i, wi - lr * m / (cpu::vec_sqrt(v) + eps));
      }
    }
    for (; i < e; ++i) {
      const T wi = w[i];
      T d = rescale * g[i] + wd * wi;
      if constexpr (decltype(clip_on)::value) d = clip(d, c);
      const T m = b1 * mean[i] + (T(1) - b1) * d;
      const T v = b2 * var[i] + (T(1) - b2) * d * d;
      mean[i] = m;
      var[i] = v;
      y[i] = wi - lr * m / (std::sqrt(v) + eps);
    }
  });
}

// The moments as adam's (without wd); the decay is decoupled and scaled by eta.
template <typename T>
void adamw(const KernelContext& ctx, std::span<const TensorView> in, const TensorView& out) {
  const auto& a = ctx.attrs.as<AdamWAttrs>();
  const T* w = in[0].ptr<T>();
  const T* g = in[1].ptr<T>();
  T* mean = in[2].ptr<T>();
  T* var = in[3].ptr<T>();
  T* y = out.ptr<T>();
  const T lr = a.lr, eta = a.eta, wd = a.wd, b1 = a.beta1, b2 = a.beta2, eps = a.epsilon, rescale = a.rescale_grad,
          c = a.clip_gradient;
  run_update(ctx, a.clip_gradient, out.size(), [&](auto clip_on, int64_t b, int64_t e) {
    int64_t i = b;
    if constexpr (std::is_same_v<T, float>) {
      using cpu::VecF;
      for (; i + cpu::kVecWidth <= e; i += cpu::kVecWidth) {
        const VecF wi = cpu::load_vec(w + i);
        VecF d = rescale * cpu::load_vec(g + i);
        if constexpr (decltype(clip_on)::value) d = d > c ? cpu::splat(c) : (d < -c ? cpu::splat(-c) : d);
        const VecF m = b1 * cpu::load_vec(mean + i) + (T(1) - b1) * d;
        const VecF v = b2 * cpu::load_vec(var + i) + (T(1) - b2) * d * d;
        cpu::store_vec(mean + i, m);
        cpu::store_vec(var + i, v);
        cpu::store_vec(y + i, wi - eta * (lr * m / (cpu::vec_sqrt(v) + eps) + wd * wi));
      }
    }
    for (; i < e; ++i) {
      const T wi = w[i];
      T d = rescale * g[i];
      if constexpr (decltype(clip_on)::value) d = clip(d, c);
      const T m = b1 * mean[i] + (T(1) - b1) * d;
      const T v = b2 * var[i] + (T(1) - b2) * d * d;
      mean[i] = m;
      var[i] = v;
      y[i] = wi - eta * (lr * m / (std::sqrt(v) + eps) + wd * wi);
    }
  });
}

template <void (*kF32)(const KernelContext&, std::span<const TensorView>, const TensorView&),
          void (*kF64)(const KernelContext&, std::span<const TensorView>, const TensorView&)>
void update_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  switch (out[0].dtype) {
    case DType::kFloat32:
      return kF32(ctx, in, out[0]);
    case DType::kFloat64:
      return kF64(ctx, in, out[0]);
    default:
      KILN_ASSERT(!"optimizer update: dtype not admitted by inference");
  }
}

}  // namespace

void register_cpu_optimizer_kernels() {
  register_kernel(OpId::kSgdUpdate, DeviceKind::kCPU, update_kernel<sgd<float>, sgd<double>>);
  register_kernel(OpId::kSgdMomUpdate, DeviceKind::kCPU, update_kernel<sgd_mom<float>, sgd_mom<double>>);
  register_kernel(OpId::kNagMomUpdate, DeviceKind::kCPU, update_kernel<nag_mom<float>, nag_mom<double>>);
  register_kernel(OpId::kAdamUpdate, DeviceKind::kCPU, update_kernel<adam<float>, adam<double>>);
  register_kernel(OpId::kAdamwUpdate, DeviceKind::kCPU, update_kernel<adamw<float>, adamw<double>>);
}

}  // namespace kiln
