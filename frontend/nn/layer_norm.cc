#include "frontend/nn/layer_norm.h"

#include "frontend/nd_layer_norm.h"

namespace kiln::nn {

LayerNorm::LayerNorm(int axis, double epsilon, bool center, bool scale, int64_t in_channels,
                     init::Initializer beta_initializer, init::Initializer gamma_initializer)
    : axis_(axis), epsilon_(epsilon), center_(center), scale_(scale) {
  KILN_CHECK(epsilon >= 0, ValueError, "LayerNorm: epsilon must be >= 0, got {}", epsilon);
  KILN_CHECK(in_channels >= 0, ValueError, "LayerNorm: in_channels must be >= 0 (0: inferred), got {}", in_channels);
  Shape c{in_channels};
  gamma_ =
      register_parameter("gamma", c, {.grad_req = scale ? GradReq::kWrite : GradReq::kNull, .init = gamma_initializer});
  beta_ =
      register_parameter("beta", c, {.grad_req = center ? GradReq::kWrite : GradReq::kNull, .init = beta_initializer});
}

NDArray LayerNorm::forward(const NDArray& x) {
  if (!gamma_.shape_known()) {
    Shape c{x.shape()[normalize_axis(axis_, x.ndim(), "LayerNorm axis")]};
    gamma_.complete_shape(c);
    beta_.complete_shape(c);
  }
  Device d = x.device();
  return nd::layer_norm(x, gamma_.data(d), beta_.data(d), {.axis = axis_, .eps = epsilon_});
}

std::string LayerNorm::to_string() const {
  int64_t c = gamma_.shape()[0];
  auto flag = [](bool b) { return b ? "True" : "False"; };
  return fmt::format("{}(in_channels={}, eps={}, axis={}, center={}, scale={})", type_name(),
                     c == 0 ? std::string("None") : std::to_string(c), epsilon_, axis_, flag(center_), flag(scale_));
}

}  // namespace kiln::nn
