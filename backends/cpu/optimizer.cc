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

// Adam's moments and step, one element or eight lanes (V = T or VecF):
// adam folds the weight decay into the gradient; adamw (kDecoupled) decays
// the weight apart from the moments and scales the whole step by eta.
template <typename T>
struct AdamStep {
  T lr, eta, wd, b1, b2, eps, rescale, c;

  static T root(T x) { return std::sqrt(x); }
  static cpu::VecF root(cpu::VecF x) { return cpu::vec_sqrt(x); }
  static T bound(T x, T c) { return clip(x, c); }
  static cpu::VecF bound(cpu::VecF x, float c) { return x > c ? cpu::splat(c) : (x < -c ? cpu::splat(-c) : x); }

  // Updates the moments m, v in place; returns the new weight.
  template <bool kDecoupled, bool kClip, typename V>
  V operator()(V w, V g, V& m, V& v) const {
    V d = rescale * g;
    if constexpr (!kDecoupled) d = d + wd * w;
    if constexpr (kClip) d = bound(d, c);
    m = b1 * m + (T(1) - b1) * d;
    v = b2 * v + (T(1) - b2) * d * d;
    const V step = lr * m / (root(v) + eps);
    if constexpr (kDecoupled) return w - eta * (step + wd * w);
    return w - step;
  }
};

template <typename T, bool kDecoupled>
void adam_family(const KernelContext& ctx, std::span<const TensorView> in, const TensorView& out,
                 const AdamStep<T>& step) {
  const T* w = in[0].ptr<T>();
  const T* g = in[1].ptr<T>();
  T* mean = in[2].ptr<T>();
  T* var = in[3].ptr<T>();
  T* y = out.ptr<T>();
  run_update(ctx, static_cast<double>(step.c), out.size(), [&](auto clip_on, int64_t b, int64_t e) {
    constexpr bool kClip = decltype(clip_on)::value;
    int64_t i = b;
    if constexpr (std::is_same_v<T, float>) {
      // Eight lanes by hand: std::sqrt's errno path keeps GCC from vectorizing the loop.
      for (; i + cpu::kVecWidth <= e; i += cpu::kVecWidth) {
        cpu::VecF m = cpu::load_vec(mean + i), v = cpu::load_vec(var + i);
        const cpu::VecF wi = step.template operator()<kDecoupled, kClip>(cpu::load_vec(w + i), cpu::load_vec(g + i), m, v);
        cpu::store_vec(mean + i, m);
        cpu::store_vec(var + i, v);
        cpu::store_vec(y + i, wi);
      }
    }
    for (; i < e; ++i) y[i] = step.template operator()<kDecoupled, kClip>(w[i], g[i], mean[i], var[i]);
  });
}

template <typename T>
void adam(const KernelContext& ctx, std::span<const TensorView> in, const TensorView& out) {
  const auto& a = ctx.attrs.as<AdamAttrs>();
  const AdamStep<T> step{T(a.lr), T(1), T(a.wd), T(a.beta1), T(a.beta2), T(a.epsilon), T(a.rescale_grad),
                         T(a.clip_gradient)};
  adam_family<T, false>(ctx, in, out, step);
}

template <typename T>
void adamw(const KernelContext& ctx, std::span<const TensorView> in, const TensorView& out) {
  const auto& a = ctx.attrs.as<AdamWAttrs>();
  const AdamStep<T> step{T(a.lr), T(a.eta), T(a.wd), T(a.beta1), T(a.beta2), T(a.epsilon), T(a.rescale_grad),
                         T(a.clip_gradient)};
  adam_family<T, true>(ctx, in, out, step);
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
