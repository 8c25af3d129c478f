#include "frontend/nn/dense.h"

#include "frontend/nd_nn.h"

namespace kiln::nn {

Dense::Dense(int64_t units, std::string activation, bool use_bias, bool flatten, int64_t in_units,
             std::optional<init::Initializer> weight_initializer, init::Initializer bias_initializer, DType dtype)
    : units_(units), flatten_(flatten) {
  KILN_CHECK(units >= 1, ValueError, "Dense: units must be >= 1, got {}", units);
  KILN_CHECK(in_units >= 0, ValueError, "Dense: in_units must be >= 0 (0: inferred), got {}", in_units);
  if (!activation.empty()) act_ = parse_attr(activation, static_cast<ActType*>(nullptr));
  weight_ = register_parameter("weight", Shape{units, in_units}, {.dtype = dtype, .init = weight_initializer});
  if (use_bias) bias_ = register_parameter("bias", Shape{units}, {.dtype = dtype, .init = bias_initializer});
}

NDArray Dense::forward(const NDArray& x) {
  if (!weight_.shape_known()) {
    // FullyConnected's input size (ir/ops/nn.h): the product of the non-batch
    // axes with flatten, else the last axis.
    KILN_CHECK(x.ndim() >= 1, ShapeError, "Dense: cannot infer in_units from a scalar input");
    int64_t in_units = 1;
    if (flatten_) {
      for (int i = 1; i < x.ndim(); ++i) in_units *= x.shape()[i];
    } else {
      in_units = x.shape()[x.ndim() - 1];
    }
    weight_.complete_shape(Shape{units_, in_units});
  }
  Device d = x.device();
  NDArray y = nd::fully_connected(x, weight_.data(d), bias_.is_none() ? NDArray() : bias_.data(d), units_, flatten_);
  return act_ ? nd::activation(y, *act_) : y;
}

std::string Dense::to_string() const {
  int64_t in = weight_.shape()[1];
  return fmt::format("{}({} -> {}, {})", type_name(), in == 0 ? std::string("None") : std::to_string(in), units_,
                     act_ ? fmt::format("Activation({})", print_attr(*act_)) : std::string("linear"));
}

}  // namespace kiln::nn
