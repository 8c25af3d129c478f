#include "frontend/nn/activation.h"

#include "frontend/nd_nn.h"

namespace kiln::nn {

Activation::Activation(const std::string& act_type) : act_(parse_attr(act_type, static_cast<ActType*>(nullptr))) {}

NDArray Activation::forward(const NDArray& x) { return nd::activation(x, act_); }

std::string Activation::to_string() const { return fmt::format("{}({})", type_name(), print_attr(act_)); }

}  // namespace kiln::nn
