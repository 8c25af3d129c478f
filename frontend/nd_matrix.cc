#include "frontend/nd_matrix.h"

#include "frontend/invoke.h"

namespace kiln::nd {

NDArray reshape(const NDArray& x, const IntTuple& shape, bool reverse) {
  return invoke1(OpId::kReshape, {x}, OpAttrs::make(ReshapeAttrs{.shape = shape, .reverse = reverse}));
}

NDArray transpose(const NDArray& x, const IntTuple& axes) {
  return invoke1(OpId::kTranspose, {x}, OpAttrs::make(TransposeAttrs{.axes = axes}));
}

NDArray slice(const NDArray& x, const OptIntTuple& begin, const OptIntTuple& end, const OptIntTuple& step) {
  return invoke1(OpId::kSlice, {x}, OpAttrs::make(SliceAttrs{.begin = begin, .end = end, .step = step}));
}

NDArray slice_axis(const NDArray& x, int axis, int64_t begin, std::optional<int64_t> end) {
  return invoke1(OpId::kSliceAxis, {x}, OpAttrs::make(SliceAxisAttrs{.axis = axis, .begin = begin, .end = end}));
}

NDArray concat(const std::vector<NDArray>& xs, int axis) {
  auto n = static_cast<int>(xs.size());
  return invoke1(OpId::kConcat, std::span<const NDArray>(xs), OpAttrs::make(ConcatAttrs{.num_args = n, .dim = axis}));
}

NDArray stack(const std::vector<NDArray>& xs, int axis) {
  auto n = static_cast<int>(xs.size());
  return invoke1(OpId::kStack, std::span<const NDArray>(xs), OpAttrs::make(StackAttrs{.axis = axis, .num_args = n}));
}

std::vector<NDArray> split(const NDArray& x, int num_outputs, int axis, bool squeeze_axis) {
  return invoke(OpId::kSplit, {x},
                OpAttrs::make(SplitAttrs{.num_outputs = num_outputs, .axis = axis, .squeeze_axis = squeeze_axis}));
}

NDArray take(const NDArray& a, const NDArray& indices, int axis, TakeMode mode) {
  return invoke1(OpId::kTake, {a, indices}, OpAttrs::make(TakeAttrs{.axis = axis, .mode = mode}));
}

NDArray one_hot(const NDArray& indices, int64_t depth, double on_value, double off_value, DType dtype) {
  return invoke1(
      OpId::kOneHot, {indices},
      OpAttrs::make(OneHotAttrs{.depth = depth, .on_value = on_value, .off_value = off_value, .dtype = dtype}));
}

NDArray expand_dims(const NDArray& x, int axis) {
  return invoke1(OpId::kExpandDims, {x}, OpAttrs::make(ExpandDimsAttrs{.axis = axis}));
}

NDArray broadcast_to(const NDArray& x, const Shape& shape) {
  return invoke1(OpId::kBroadcastTo, {x}, OpAttrs::make(BroadcastToAttrs{.shape = shape}));
}

}  // namespace kiln::nd
