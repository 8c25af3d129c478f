#include "frontend/nd_conv.h"

#include "frontend/invoke.h"
#include "ir/ops/conv_layout.h"

namespace kiln::nd {

NDArray convolution(const NDArray& data, const NDArray& weight, const NDArray& bias, ConvolutionAttrs attrs) {
  KILN_CHECK(!weight.is_none(), ValueError, "Convolution: the weight is an empty (none) NDArray");
  const Shape& w = weight.shape();
  if (attrs.kernel.ndim() == 0 && w.ndim() > 2)  // [F, C, k...] or, channel-last, [F, k..., C]
    attrs.kernel = channels_last(attrs.layout) ? Shape(w.dims().subspan(1, w.ndim() - 2)) : Shape(w.dims().subspan(2));
  if (attrs.num_filter == 0 && w.ndim() > 0) attrs.num_filter = static_cast<int>(w[0]);
  attrs.no_bias = bias.is_none();
  if (attrs.no_bias) return invoke1(OpId::kConvolution, {data, weight}, OpAttrs::make(std::move(attrs)));
  return invoke1(OpId::kConvolution, {data, weight, bias}, OpAttrs::make(std::move(attrs)));
}

NDArray pooling(const NDArray& data, const PoolingAttrs& attrs) {
  return invoke1(OpId::kPooling, {data}, OpAttrs::make(attrs));
}

NDArray batch_norm(const NDArray& data, const NDArray& gamma, const NDArray& beta, const NDArray& moving_mean,
                   const NDArray& moving_var, const BatchNormAttrs& attrs) {
  return batch_norm_all(data, gamma, beta, moving_mean, moving_var, attrs)[0];
}

std::vector<NDArray> batch_norm_all(const NDArray& data, const NDArray& gamma, const NDArray& beta,
                                    const NDArray& moving_mean, const NDArray& moving_var,
                                    const BatchNormAttrs& attrs) {
  return invoke(OpId::kBatchNorm, {data, gamma, beta, moving_mean, moving_var}, OpAttrs::make(attrs));
}

}  // namespace kiln::nd
