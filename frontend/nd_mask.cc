#include "frontend/nd_mask.h"

#include <limits>

#include "frontend/nd_elemwise.h"
#include "frontend/nd_init.h"
#include "frontend/nd_matrix.h"
#include "frontend/nd_nn.h"

namespace kiln::nd {

NDArray causal_mask(int64_t length, ArrayOptions options) {
  KILN_CHECK(length >= 0, ValueError, "causal_mask: length must be >= 0, got {}", length);
  const double n = static_cast<double>(length);
  NDArray steps = nd::arange(0, n, 1, options);
  NDArray query = nd::expand_dims(steps, 1), key = nd::expand_dims(steps, 0);  // [length, 1], [1, length]
  return key <= query;  // broadcast_lesser_equal: 1 or 0 in options.dtype
}

NDArray masked_softmax(const NDArray& x, const NDArray& mask, int axis) {
  Shape joint;
  try {
    joint = broadcast_shapes(x.shape(), mask.shape(), "masked_softmax");
  } catch (const ShapeError&) {
    throw ShapeError(
        fmt::format("masked_softmax: mask {} does not broadcast to the scores {}", mask.shape(), x.shape()));
  }
  KILN_CHECK(joint == x.shape(), ShapeError, "masked_softmax: mask {} does not broadcast to the scores {}",
             mask.shape(), x.shape());
  NDArray keep = mask.shape() == x.shape() ? mask : nd::broadcast_to(mask, x.shape());
  NDArray keep_x = keep.dtype() == x.dtype() ? keep : keep.astype(x.dtype());
  // Masked scores become the lowest finite value: exp of (lowest - max) is 0
  // when the row keeps anything; an all-masked row is then zeroed by keep_x.
  const double lowest =
      x.dtype() == DType::kFloat64 ? std::numeric_limits<double>::lowest() : std::numeric_limits<float>::lowest();
  NDArray filled = nd::where(keep, x, nd::full(x.shape(), lowest, {x.dtype(), x.device()}));
  return nd::softmax(filled, axis) * keep_x;
}

}  // namespace kiln::nd
