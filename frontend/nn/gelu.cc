#include "frontend/nn/gelu.h"

#include "frontend/nd_nn.h"

namespace kiln::nn {

namespace {

LeakyType parse_approximation(const std::string& a) {
  if (a == "erf" || a == "none") return LeakyType::kGelu;
  if (a == "tanh") return LeakyType::kGeluTanh;
  throw ValueError(fmt::format("GELU: approximation must be 'erf' (or 'none') or 'tanh', got '{}'", a));
}

}  // namespace

GELU::GELU(const std::string& approximation) : act_(parse_approximation(approximation)) {}

NDArray GELU::forward(const NDArray& x) { return nd::leaky_relu(x, act_); }

std::string GELU::to_string() const {
  return fmt::format("{}(approximation={})", type_name(), act_ == LeakyType::kGeluTanh ? "tanh" : "erf");
}

}  // namespace kiln::nn
