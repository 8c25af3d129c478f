#include "frontend/nn/flatten.h"

#include "frontend/nd_nn.h"

namespace kiln::nn {

NDArray Flatten::forward(const NDArray& x) { return nd::flatten(x); }

}  // namespace kiln::nn
