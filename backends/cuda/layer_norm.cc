// LayerNorm and _backward_LayerNorm on CUDA (layer_norm.cu), float32.
#include "backends/cuda/layer_norm.h"

#include "backends/cuda/kernel_util.h"
#include "ir/ops/layer_norm.h"

namespace kiln {
namespace {

void layer_norm(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  cuda::require_f32(in, out);
  const auto& a = ctx.attrs.as<LayerNormAttrs>();
  LayerNormDims d = layer_norm_dims(a, in[0].shape);
  KILN_CUDA_LAUNCH(
      cuda::launch_layer_norm(in[0].ptr<float>(), in[1].ptr<float>(), in[2].ptr<float>(), out[0].ptr<float>(),
                              out[1].ptr<float>(), out[2].ptr<float>(), d.outer * d.inner, d.n, d.inner,
                              static_cast<float>(a.eps), cuda::stream_of(ctx)),
      ctx);
}

// (out_grad, data, gamma, mean, std) -> (d_data, d_gamma, d_beta)
void layer_norm_backward(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  cuda::require_f32(in, out);
  LayerNormDims d = layer_norm_dims(ctx.attrs.as<LayerNormAttrs>(), in[1].shape);
  KILN_CUDA_LAUNCH(
      cuda::launch_layer_norm_backward(in[0].ptr<float>(), in[1].ptr<float>(), in[2].ptr<float>(), in[3].ptr<float>(),
                                       in[4].ptr<float>(), out[0].ptr<float>(), out[1].ptr<float>(),
                                       out[2].ptr<float>(), d.outer * d.inner, d.n, d.inner, cuda::stream_of(ctx)),
      ctx);
}

}  // namespace

void register_cuda_layer_norm_kernels() {
  register_kernel(OpId::kLayerNorm, DeviceKind::kCUDA, layer_norm);
  register_kernel(OpId::kLayerNormBackward, DeviceKind::kCUDA, layer_norm_backward);
}

}  // namespace kiln
