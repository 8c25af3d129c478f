#include "frontend/nd_layer_norm.h"

#include "frontend/invoke.h"

namespace kiln::nd {

NDArray layer_norm(const NDArray& data, const NDArray& gamma, const NDArray& beta, const LayerNormAttrs& attrs) {
  return layer_norm_all(data, gamma, beta, attrs)[0];
}

std::array<NDArray, 3> layer_norm_all(const NDArray& data, const NDArray& gamma, const NDArray& beta,
                                      const LayerNormAttrs& attrs) {
  std::vector<NDArray> o = invoke(OpId::kLayerNorm, {data, gamma, beta}, OpAttrs::make(attrs));
  return {o[0], o[1], o[2]};
}

}  // namespace kiln::nd
