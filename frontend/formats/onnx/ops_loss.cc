// ONNX's NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12+)
// in Kiln ops: the target class's value picked along axis 1, weighted by
// the class weight, ignored targets masked out, then reduced (none, sum, or
// mean: the sum over the sum of the weights of the targets kept).
#include "frontend/formats/onnx/node_context.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"

namespace kiln::onnx {
namespace {

// The loss of input `x` ([N, C, d...], log-probabilities) against the
// target input 1 and the optional weight input 2.
ir::Entry nll(NodeContext& n, ir::Entry x) {
  const DType dtype = n.entry_type(x).dtype;
  KILN_CHECK(is_integral(n.type(1).dtype), TypeError, "target must be integers, got {}", dtype_name(n.type(1).dtype));
  std::string reduction = n.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") n.unsupported(fmt::format("reduction '{}'", reduction));
  ir::Entry target = n.input(1);
  ir::Entry loss = n.op1(OpId::kNegative, {n.op1(OpId::kPick, {x, target}, PickAttrs{.axis = 1})});
  std::optional<ir::Entry> weight;  // per element: the class weight, 0 where ignored
  if (n.has_input(2)) {
    weight = n.op1(OpId::kTake, {n.input(2), target}, TakeAttrs{.axis = 0, .mode = TakeMode::kClip});
  }
  if (n.has_attr("ignore_index")) {
    ir::Entry keep = n.op1(OpId::kNotEqualScalar, {target}, ScalarAttrs{.scalar = static_cast<double>(n.attr_int("ignore_index", 0))});
    keep = n.op1(OpId::kCast, {keep}, CastAttrs{.dtype = dtype});
    weight = weight ? n.op1(OpId::kBroadcastMul, {*weight, keep}) : keep;
  }
  if (weight) loss = n.op1(OpId::kBroadcastMul, {loss, *weight});
  if (reduction == "none") return loss;
  ir::Entry sum = n.op1(OpId::kSum, {loss}, ReduceAttrs{});
  if (reduction == "sum") return sum;
  if (!weight) return n.op1(OpId::kMean, {loss}, ReduceAttrs{});
  return n.op1(OpId::kBroadcastDiv, {sum, n.op1(OpId::kSum, {*weight}, ReduceAttrs{})});
}

void convert_nll_loss(NodeContext& n) {
  KILN_CHECK(n.shape(0).ndim() >= 2, ShapeError, "expected input [N,C,...], got {}", n.shape(0));
  n.set_output(0, nll(n, n.input(0)));
}

void convert_softmax_cross_entropy(NodeContext& n) {
  KILN_CHECK(n.shape(0).ndim() >= 2, ShapeError, "expected scores [N,C,...], got {}", n.shape(0));
  ir::Entry log_prob = n.op1(OpId::kLogSoftmax, {n.input(0)}, SoftmaxAttrs{.axis = 1});
  n.set_output(0, nll(n, log_prob));
  n.set_output(1, log_prob);
}

KILN_ONNX_CONVERTER("NegativeLogLikelihoodLoss", convert_nll_loss);
KILN_ONNX_CONVERTER("SoftmaxCrossEntropyLoss", convert_softmax_cross_entropy);

}  // namespace
}  // namespace kiln::onnx
