// ONNX converters of reductions: ReduceMean/Sum/Max/Min/Prod, the composed
// ReduceSumSquare/L1/L2/LogSum/LogSumExp, ArgMax/ArgMin.
#include <fmt/ranges.h>

#include "frontend/formats/onnx/node_context.h"
#include "frontend/nd_init.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"

namespace kiln::onnx {
namespace {

// ReduceX: axes as an attribute, or (ReduceSum from opset 13) an optional input.
template <OpId kId>
void convert_reduce(NodeContext& n) {
  const int rank = n.shape(0).ndim();
  bool axes_input = n.op_type() == "ReduceSum" && n.opset() >= 13;
  std::optional<std::vector<int64_t>> axes = axes_of(n, axes_input ? 13 : 18);
  bool keepdims = n.attr_int("keepdims", 1) != 0;
  if ((!axes || axes->empty()) && n.attr_int("noop_with_empty_axes", 0) != 0) {
    n.set_output(0, n.input(0));
    return;
  }
  ReduceAttrs a{.keepdims = keepdims};
  if (axes && !axes->empty()) {
    IntTuple norm;
    for (int64_t x : *axes) norm.push_back(normalize_onnx_axis(n, x, rank));
    a.axis = norm;
  }
  n.set_output(0, n.op1(kId, {n.input(0)}, a));
}

// ArgMax/ArgMin: Kiln's give the first extremum in the input's dtype; ONNX int64.
// select_last_index 1: the first extremum of the axis reversed (a slice with
// step -1), counted back from the end: (len - 1) - index.
template <OpId kId>
void convert_arg_reduce(NodeContext& n) {
  const Shape& shape = n.shape(0);
  int axis = normalize_onnx_axis(n, n.attr_int("axis", 0), shape.ndim());
  const bool last = n.attr_int("select_last_index", 0) != 0;
  ir::Entry x = n.input(0);
  if (last) {
    std::vector<std::optional<int64_t>> none(static_cast<size_t>(shape.ndim())), step(none.size(), 1);
    step[static_cast<size_t>(axis)] = -1;
    x = n.op1(OpId::kSlice, {x}, SliceAttrs{.begin = OptIntTuple(none), .end = OptIntTuple(none),
                                             .step = OptIntTuple(step)});
  }
  ir::Entry y = n.op1(kId, {x}, ArgReduceAttrs{.axis = axis, .keepdims = n.attr_int("keepdims", 1) != 0});
  if (last) {
    y = n.op1(OpId::kRMinusScalar, {y}, ScalarAttrs{.scalar = static_cast<double>(shape[axis] - 1)});
  }
  n.set_output(0, n.op1(OpId::kCast, {y}, CastAttrs{.dtype = DType::kInt64}));
}

// The reductions ONNX composes: SumSquare, L1, L2, LogSum, LogSumExp.
template <OpId kInner, OpId kOuter>
void convert_composed_reduce(NodeContext& n) {
  const int rank = n.shape(0).ndim();
  std::optional<std::vector<int64_t>> axes = axes_of(n, 18);
  ReduceAttrs a{.keepdims = n.attr_int("keepdims", 1) != 0};
  if (axes && !axes->empty()) {
    IntTuple norm;
    for (int64_t x : *axes) norm.push_back(normalize_onnx_axis(n, x, rank));
    a.axis = norm;
  }
  ir::Entry y = n.input(0);
  if (kInner != OpId::kCopy) y = n.op1(kInner, {y});
  y = n.op1(OpId::kSum, {y}, a);
  if (kOuter != OpId::kCopy) y = n.op1(kOuter, {y});
  n.set_output(0, y);
}

KILN_ONNX_CONVERTER("ArgMax", convert_arg_reduce<OpId::kArgmax>);
KILN_ONNX_CONVERTER("ArgMin", convert_arg_reduce<OpId::kArgmin>);
KILN_ONNX_CONVERTER("ReduceSumSquare", (convert_composed_reduce<OpId::kSquare, OpId::kCopy>));
KILN_ONNX_CONVERTER("ReduceL1", (convert_composed_reduce<OpId::kAbs, OpId::kCopy>));
KILN_ONNX_CONVERTER("ReduceL2", (convert_composed_reduce<OpId::kSquare, OpId::kSqrt>));
KILN_ONNX_CONVERTER("ReduceLogSum", (convert_composed_reduce<OpId::kCopy, OpId::kLog>));
KILN_ONNX_CONVERTER("ReduceLogSumExp", (convert_composed_reduce<OpId::kExp, OpId::kLog>));
KILN_ONNX_CONVERTER("ReduceMean", convert_reduce<OpId::kMean>);
KILN_ONNX_CONVERTER("ReduceSum", convert_reduce<OpId::kSum>);
KILN_ONNX_CONVERTER("ReduceMax", convert_reduce<OpId::kMax>);
KILN_ONNX_CONVERTER("ReduceMin", convert_reduce<OpId::kMin>);
KILN_ONNX_CONVERTER("ReduceProd", convert_reduce<OpId::kProd>);

}  // namespace
}  // namespace kiln::onnx
