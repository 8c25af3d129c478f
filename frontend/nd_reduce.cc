#include "frontend/nd_reduce.h"

#include "frontend/invoke.h"
#include "ir/ops/reduce.h"

namespace kiln::nd {
namespace {

NDArray reduce(OpId op, const NDArray& x, const IntTuple& axes, bool keepdims, bool exclude) {
  std::optional<IntTuple> axis;
  if (!axes.empty()) axis = axes;
  return invoke1(op, {x}, OpAttrs::make(ReduceAttrs{.axis = axis, .keepdims = keepdims, .exclude = exclude}));
}

}  // namespace

NDArray sum(const NDArray& x, const IntTuple& axes, bool keepdims, bool exclude) {
  return reduce(OpId::kSum, x, axes, keepdims, exclude);
}
NDArray mean(const NDArray& x, const IntTuple& axes, bool keepdims, bool exclude) {
  return reduce(OpId::kMean, x, axes, keepdims, exclude);
}
NDArray max(const NDArray& x, const IntTuple& axes, bool keepdims, bool exclude) {
  return reduce(OpId::kMax, x, axes, keepdims, exclude);
}
NDArray min(const NDArray& x, const IntTuple& axes, bool keepdims, bool exclude) {
  return reduce(OpId::kMin, x, axes, keepdims, exclude);
}
NDArray prod(const NDArray& x, const IntTuple& axes, bool keepdims, bool exclude) {
  return reduce(OpId::kProd, x, axes, keepdims, exclude);
}

NDArray argmax(const NDArray& x, std::optional<int> axis, bool keepdims) {
  return invoke1(OpId::kArgmax, {x}, OpAttrs::make(ArgReduceAttrs{.axis = axis, .keepdims = keepdims}));
}
NDArray argmin(const NDArray& x, std::optional<int> axis, bool keepdims) {
  return invoke1(OpId::kArgmin, {x}, OpAttrs::make(ArgReduceAttrs{.axis = axis, .keepdims = keepdims}));
}

NDArray norm(const NDArray& x, int ord, const IntTuple& axes, bool keepdims) {
  std::optional<IntTuple> axis;
  if (!axes.empty()) axis = axes;
  return invoke1(OpId::kNorm, {x}, OpAttrs::make(NormAttrs{.ord = ord, .axis = axis, .keepdims = keepdims}));
}

}  // namespace kiln::nd
