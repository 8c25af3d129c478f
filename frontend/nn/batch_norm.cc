#include "frontend/nn/batch_norm.h"

#include "frontend/nd_conv.h"

namespace kiln::nn {

BatchNorm::BatchNorm(int axis, double momentum, double epsilon, bool center, bool scale, bool use_global_stats,
                     int64_t in_channels, init::Initializer beta_initializer, init::Initializer gamma_initializer,
                     init::Initializer running_mean_initializer, init::Initializer running_variance_initializer)
    : axis_(axis), momentum_(momentum), epsilon_(epsilon), scale_(scale), use_global_stats_(use_global_stats) {
  KILN_CHECK(epsilon > 0, ValueError, "BatchNorm: epsilon must be > 0, got {}", epsilon);
  KILN_CHECK(momentum >= 0 && momentum <= 1, ValueError, "BatchNorm: momentum must be in [0, 1], got {}", momentum);
  KILN_CHECK(in_channels >= 0, ValueError, "BatchNorm: in_channels must be >= 0 (0: inferred), got {}", in_channels);
  Shape c{in_channels};
  gamma_ =
      register_parameter("gamma", c, {.grad_req = scale ? GradReq::kWrite : GradReq::kNull, .init = gamma_initializer});
  beta_ =
      register_parameter("beta", c, {.grad_req = center ? GradReq::kWrite : GradReq::kNull, .init = beta_initializer});
  running_mean_ = register_parameter("running_mean", c, {.init = running_mean_initializer, .is_aux = true});
  running_var_ = register_parameter("running_var", c, {.init = running_variance_initializer, .is_aux = true});
}

void BatchNorm::infer_channels(const NDArray& x) {
  if (gamma_.shape_known()) return;
  int axis = normalize_axis(axis_, x.ndim(), "BatchNorm");
  Shape c{x.shape()[axis]};
  for (Parameter* p : {&gamma_, &beta_, &running_mean_, &running_var_}) p->complete_shape(c);
}

NDArray BatchNorm::forward(const NDArray& x) {
  infer_channels(x);
  Device d = x.device();
  BatchNormAttrs attrs{.eps = epsilon_,
                       .momentum = static_cast<float>(momentum_),
                       .fix_gamma = !scale_,
                       .use_global_stats = use_global_stats_,
                       .axis = axis_};
  return nd::batch_norm(x, gamma_.data(d), beta_.data(d), running_mean_.data(d), running_var_.data(d), attrs);
}

std::string BatchNorm::to_string() const {
  int64_t c = gamma_.shape()[0];
  return fmt::format("{}(axis={}, eps={}, momentum={}, fix_gamma={}, use_global_stats={}, in_channels={})", type_name(),
                     axis_, epsilon_, momentum_, scale_ ? "False" : "True", use_global_stats_ ? "True" : "False",
                     c == 0 ? std::string("None") : std::to_string(c));
}

}  // namespace kiln::nn
