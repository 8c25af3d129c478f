#include "ir/grad.h"

#include "ir/ops/matrix.h"
#include "ir/ops/reduce.h"

namespace kiln {

GradValue unbroadcast(GradBuilder& b, GradValue grad, const Shape& target) {
  Shape from = b.type(grad).shape;
  if (from == target) return grad;
  IntTuple axes;
  int lead = from.ndim() - target.ndim();
  KILN_ASSERT(lead >= 0);
  for (int i = 0; i < from.ndim(); ++i) {
    if (i < lead || (target[i - lead] == 1 && from[i] != 1)) axes.push_back(i);
  }
  GradValue summed = grad;
  if (!axes.empty()) {
    ReduceAttrs sum;
    sum.axis = axes;
    sum.keepdims = true;
    summed = b.op(OpId::kSum, {grad}, OpAttrs::make(sum));
  }
  ReshapeAttrs reshape;
  reshape.shape = target.to_vector();
  return b.op(OpId::kReshape, {summed}, OpAttrs::make(reshape));
}

}  // namespace kiln
