// CPU kernel: Dropout -> (out, mask).
//
// Mask element j is kept when the uniform at stream position offset + j
// (a hash of seed and position: no generator state, so the mask does not
// depend on thread count or scheduling) is below 1 - p.
#include <algorithm>
#include <cstring>

#include "backends/counter_rng.h"
#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/nn_kernels.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/nn.h"

namespace kiln::cpu {
namespace {

using rng::uniform_at;

template <typename T>
void fill_mask(int threads, const DropoutAttrs& a, T* mask, int64_t n) {
  const double keep = 1.0 - a.p;
  const T scale = store<T>(keep > 0 ? static_cast<compute_t<T>>(1.0 / keep) : 0);
  const T zero = store<T>(0);
  const auto seed = static_cast<uint64_t>(a.seed), offset = static_cast<uint64_t>(a.offset);
  parallel_for(threads, n, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) mask[j] = uniform_at(seed, offset + static_cast<uint64_t>(j)) < keep ? scale : zero;
  });
}

// out = x * mask, where mask has length-1 axes that broadcast.
template <typename T>
void apply_mask(int threads, const TensorView& x, const TensorView& mask, const TensorView& out) {
  const T* xp = x.ptr<T>();
  const T* mp = mask.ptr<T>();
  T* yp = out.ptr<T>();
  const int64_t n = x.size();
  if (mask.shape == x.shape) {
    parallel_for(threads, n, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) yp[i] = store<T>(load(xp[i]) * load(mp[i]));
    });
    return;
  }
  // Rows along the last axis: the mask either runs along the row or is constant on it.
  const int nd = x.shape.ndim();
  const int64_t row = x.shape[nd - 1];
  const bool mask_varies = mask.shape[nd - 1] != 1;
  const auto mask_strides = mask.shape.strides();
  parallel_for(
      threads, n / std::max<int64_t>(row, 1),
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          int64_t rest = r, m = 0;
          for (int i = nd - 2; i >= 0; --i) {
            int64_t coord = rest % x.shape[i];
            rest /= x.shape[i];
            if (mask.shape[i] != 1) m += coord * mask_strides[i];
          }
          const T* xr = xp + r * row;
          T* yr = yp + r * row;
          if (mask_varies) {
#pragma omp simd
            for (int64_t j = 0; j < row; ++j) yr[j] = store<T>(load(xr[j]) * load(mp[m + j]));
          } else {
            const auto s = load(mp[m]);
#pragma omp simd
            for (int64_t j = 0; j < row; ++j) yr[j] = store<T>(load(xr[j]) * s);
          }
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(row, 1)));
}

void dropout_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<DropoutAttrs>();
  const bool active = (a.mode == DropoutMode::kAlways || ctx.is_train) && a.p > 0;
  const int threads = ctx.run.num_threads;
  dispatch_floating(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    T* mask = out[1].ptr<T>();
    if (!active) {
      std::fill(mask, mask + out[1].size(), store<T>(1));
      if (out[0].data != in[0].data) std::memcpy(out[0].data, in[0].data, in[0].bytes());
      return;
    }
    fill_mask(threads, a, mask, out[1].size());
    apply_mask<T>(threads, in[0], out[1], out[0]);
  });
}

}  // namespace

void register_nn_dropout_kernels() {
  register_kernel(OpId::kDropout, DeviceKind::kCPU, dropout_kernel, HalfSupport::kAny);
}

}  // namespace kiln::cpu
