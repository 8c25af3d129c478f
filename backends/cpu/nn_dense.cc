// CPU kernels: FullyConnected, _kiln_fc_act, Flatten, add_n.
//
// bfloat16 and float16 run cpu::dense_onednn (or widen to float32 where
// oneDNN has no kernel for the type). float32 FullyConnected and _kiln_fc_act run cpu::dense_f32
// (backends/cpu/linalg_kernels.h: the GEMV loops for one sample, oneDNN
// matmul with bias and eltwise post-ops otherwise) on the operands seen as
// data [m, k] and weight [n, k] transposed. float64 runs the dot kernel, then
// adds the bias and applies the activation in passes over the output.
#include <algorithm>
#include <cstring>

#include "backends/cpu/elemwise_kernels.h"
#include "backends/cpu/linalg_kernels.h"
#include "backends/cpu/nn_kernels.h"
#include "backends/cpu/onednn_util.h"
#include "backends/cpu/widen.h"
#include "backends/cpu/parallel.h"
#include "ir/ops/fused_layers.h"
#include "ir/ops/linalg.h"
#include "ir/ops/nn.h"

namespace kiln::cpu {
namespace {

// ---- FullyConnected

template <typename T>
void add_bias(int threads, T* out, const T* bias, int64_t m, int64_t n) {
  parallel_for(
      threads, m,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          T* row = out + r * n;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(n, 1)));
}

// Inference checked the shapes: weight is [n, k] and the output [..., n]
// holds one row per row of data seen as [m, k] (so the kernel reads m from
// the output rather than rebuilding the shapes per call; k may be 0).
void dense(const KernelContext& ctx, const FullyConnectedAttrs& a, std::optional<ActType> act,
           std::span<const TensorView> in, const TensorView& out) {
  cpu::DenseDims d{.m = 0, .k = in[1].shape[1], .n = in[1].shape[0]};
  if (d.n > 0) d.m = out.size() / d.n;
  if (out.dtype == DType::kBfloat16 || out.dtype == DType::kFloat16) {
    if (d.k == 0 || !onednn::computes_in(out.dtype)) return widen(ctx, in, std::span<const TensorView>(&out, 1));
    return dense_onednn(ctx.run, d, out.dtype, in[0].data, in[1].data, a.no_bias ? nullptr : in[2].data, act,
                        out.data);
  }
  if (out.dtype == DType::kFloat32) {
    return dense_f32(ctx.run, {d.m, d.k, d.n}, in[0].ptr<float>(), in[1].ptr<float>(),
                     a.no_bias ? nullptr : in[2].ptr<float>(), act, out.ptr<float>());
  }
  static const KernelFn dot_kernel = find_kernel(op_def(OpId::kDot), Device::cpu(0));
  static const OpAttrs& dot_nt = *new OpAttrs(OpAttrs::make(DotAttrs{.transpose_b = true}));  // leaked: used during exit()
  const TensorView operands[] = {{in[0].data, Shape{d.m, d.k}, in[0].dtype},
                                 {in[1].data, Shape{d.n, d.k}, in[1].dtype}};
  const TensorView product[] = {{out.data, Shape{d.m, d.n}, out.dtype}};
  KernelContext dot_ctx{ctx.run, dot_nt, ctx.is_train};
  dot_kernel(dot_ctx, std::span<const TensorView>(operands, 2), std::span<const TensorView>(product, 1));
  if (!a.no_bias) {
    dispatch_float(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      add_bias(ctx.run.num_threads, out.ptr<T>(), in[2].ptr<T>(), d.m, d.n);
    });
  }
  if (act) activation_inplace(ctx.run.num_threads, *act, out);
}

void fully_connected_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  dense(ctx, ctx.attrs.as<FullyConnectedAttrs>(), std::nullopt, in, out[0]);
}

void fc_act_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<FcActAttrs>();
  dense(ctx, a, a.act_type, in, out[0]);
}

// ---- Flatten

void flatten_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (in[0].data == out[0].data) return;
  const char* src = static_cast<const char*>(in[0].data);
  char* dst = static_cast<char*>(out[0].data);
  const int64_t bytes = static_cast<int64_t>(in[0].bytes());
  parallel_for(
      ctx.run.num_threads, bytes,
      [&](int64_t b, int64_t e) { std::memcpy(dst + b, src + b, static_cast<size_t>(e - b)); }, int64_t{1} << 20);
}

// ---- add_n

// Blocks of kBlock elements are summed in a local buffer and then stored, so
// the output may be any one of the inputs.
// 16-bit floats accumulate in float32 (compute_t) and round once.
template <typename T>
void add_n_typed(int threads, std::span<const TensorView> in, T* out, int64_t n) {
  using C = compute_t<T>;
  constexpr int64_t kBlock = 1024;
  parallel_for(threads, n, [&](int64_t b, int64_t e) {
    C acc[kBlock];
    for (int64_t s = b; s < e; s += kBlock) {
      const int64_t len = std::min(kBlock, e - s);
      const T* first = in[0].ptr<T>() + s;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) acc[i] = load(first[i]);
      for (size_t k = 1; k < in.size(); ++k) {
        const T* x = in[k].ptr<T>() + s;
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) acc[i] += load(x[i]);
      }
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) out[s + i] = store<T>(acc[i]);
    }
  });
}

void add_n_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const int threads = ctx.run.num_threads;
  const int64_t n = out[0].size();
  switch (out[0].dtype) {
    case DType::kFloat32:
      return add_n_typed(threads, in, out[0].ptr<float>(), n);
    case DType::kFloat64:
      return add_n_typed(threads, in, out[0].ptr<double>(), n);
    case DType::kBfloat16:
      return add_n_typed(threads, in, out[0].ptr<BFloat16>(), n);
    case DType::kFloat16:
      return add_n_typed(threads, in, out[0].ptr<Half>(), n);
    case DType::kInt32:
      return add_n_typed(threads, in, out[0].ptr<int32_t>(), n);
    case DType::kInt64:
      return add_n_typed(threads, in, out[0].ptr<int64_t>(), n);
    default:
      KILN_ASSERT(!"add_n: dtype not admitted by inference");
  }
}

}  // namespace

void register_nn_dense_kernels() {
  register_kernel(OpId::kFullyConnected, DeviceKind::kCPU, fully_connected_kernel, HalfSupport::kAny);
  register_kernel(OpId::kFcAct, DeviceKind::kCPU, fc_act_kernel, HalfSupport::kAny);
  register_kernel(OpId::kFlatten, DeviceKind::kCPU, flatten_kernel, HalfSupport::kAny);
  register_kernel(OpId::kAddN, DeviceKind::kCPU, add_n_kernel, HalfSupport::kAny);
}

}  // namespace kiln::cpu
