// Fused optimizer updates on CUDA (optimizer.cu), float32.
#include "backends/cuda/kernel_util.h"
#include "ir/ops/optimizer.h"

namespace kiln {
namespace {

using cuda::UpdateOp;

template <typename A>
cuda::UpdateParams common(const A& a) {
  cuda::UpdateParams p;
  p.lr = static_cast<float>(a.lr);
  p.wd = static_cast<float>(a.wd);
  p.rescale_grad = static_cast<float>(a.rescale_grad);
  p.clip_gradient = static_cast<float>(a.clip_gradient);
  return p;
}

void run(const KernelContext& ctx, UpdateOp op, std::span<const TensorView> in, std::span<const TensorView> out,
         const cuda::UpdateParams& p) {
  cuda::require_f32(in, out);
  float* s0 = in.size() > 2 ? in[2].ptr<float>() : nullptr;
  float* s1 = in.size() > 3 ? in[3].ptr<float>() : nullptr;
  KILN_CUDA_LAUNCH(cuda::launch_update(op, in[0].ptr<float>(), in[1].ptr<float>(), s0, s1, out[0].ptr<float>(),
                                       out[0].size(), p, cuda::stream_of(ctx)),
                   ctx);
}

void sgd(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  run(ctx, UpdateOp::kSgd, in, out, common(ctx.attrs.as<SgdAttrs>()));
}

void sgd_mom(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<SgdMomAttrs>();
  cuda::UpdateParams p = common(a);
  p.momentum = static_cast<float>(a.momentum);
  run(ctx, UpdateOp::kSgdMom, in, out, p);
}

void nag_mom(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<NagMomAttrs>();
  cuda::UpdateParams p = common(a);
  p.momentum = static_cast<float>(a.momentum);
  run(ctx, UpdateOp::kNagMom, in, out, p);
}

void adam(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<AdamAttrs>();
  cuda::UpdateParams p = common(a);
  p.beta1 = static_cast<float>(a.beta1);
  p.beta2 = static_cast<float>(a.beta2);
  p.epsilon = static_cast<float>(a.epsilon);
  run(ctx, UpdateOp::kAdam, in, out, p);
}

void adamw(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  const auto& a = ctx.attrs.as<AdamWAttrs>();
  cuda::UpdateParams p = common(a);
  p.beta1 = static_cast<float>(a.beta1);
  p.beta2 = static_cast<float>(a.beta2);
  p.epsilon = static_cast<float>(a.epsilon);
  p.eta = static_cast<float>(a.eta);
  run(ctx, UpdateOp::kAdamW, in, out, p);
}

}  // namespace

void register_cuda_optimizer_kernels() {
  constexpr DeviceKind k = DeviceKind::kCUDA;
  register_kernel(OpId::kSgdUpdate, k, sgd);
  register_kernel(OpId::kSgdMomUpdate, k, sgd_mom);
  register_kernel(OpId::kNagMomUpdate, k, nag_mom);
  register_kernel(OpId::kAdamUpdate, k, adam);
  register_kernel(OpId::kAdamwUpdate, k, adamw);
}

}  // namespace kiln
