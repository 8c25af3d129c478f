#include "frontend/nn/dropout.h"

#include "frontend/nd_nn.h"

namespace kiln::nn {

Dropout::Dropout(double rate, IntTuple axes) : rate_(rate), axes_(std::move(axes)) {
  KILN_CHECK(rate >= 0 && rate < 1, ValueError, "Dropout: rate must be in [0, 1), got {}", rate);
}

NDArray Dropout::forward(const NDArray& x) { return rate_ > 0 ? nd::dropout(x, rate_, axes_) : x; }

std::string Dropout::to_string() const {
  return fmt::format("{}(p = {}, axes={})", type_name(), print_attr(rate_), print_attr(axes_));
}

}  // namespace kiln::nn
