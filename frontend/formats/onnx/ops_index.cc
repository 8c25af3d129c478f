// ONNX converters of indexing ops: Gather (Kiln's take), GatherElements
// (picks), OneHot and Hardmax (Kiln's one_hot), Trilu (a mask made at import).
#include <fmt/ranges.h>

#include <algorithm>

#include "frontend/formats/onnx/node_context.h"
#include "frontend/nd_init.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"

namespace kiln::onnx {
namespace {

void convert_gather(NodeContext& n) {
  int axis = normalize_onnx_axis(n, n.attr_int("axis", 0), n.shape(0).ndim());
  KILN_CHECK(is_integral(n.type(1).dtype), TypeError, "indices must be integers, got {}", dtype_name(n.type(1).dtype));
  // wrap: ONNX's negative indices count from the end (out-of-range ones are an error in ONNX).
  n.set_output(0, n.op1(OpId::kTake, {n.input(0), n.input(1)}, TakeAttrs{.axis = axis, .mode = TakeMode::kWrap}));
}

// GatherElements as Kiln's pick, once per index along `axis` (at most
// kMaxGatherElementsPicks), concatenated; data is first cut to the
// indices' extent on the other axes.
constexpr int64_t kMaxGatherElementsPicks = 256;

void convert_gather_elements(NodeContext& n) {
  const Shape& x = n.shape(0);
  const Shape& idx = n.shape(1);
  KILN_CHECK(x.ndim() == idx.ndim() && x.ndim() >= 1, ShapeError, "data {} and indices {} differ in rank", x, idx);
  int axis = normalize_onnx_axis(n, n.attr_int("axis", 0), x.ndim());
  ir::Entry data = n.input(0);
  for (int d = 0; d < x.ndim(); ++d) {
    if (d == axis || idx[d] == x[d]) continue;
    KILN_CHECK(idx[d] < x[d], ShapeError, "indices {} exceed data {} on axis {}", idx, x, d);
    data = slice_axis(n, data, d, 0, idx[d]);
  }
  const int64_t picks = idx[axis];
  if (picks > kMaxGatherElementsPicks) n.unsupported(fmt::format("{} indices along axis {} (at most {})", picks, axis, kMaxGatherElementsPicks));
  ir::Entry indices = n.input(1);
  std::vector<ir::Entry> parts;
  for (int64_t k = 0; k < picks; ++k) {
    ir::Entry one = picks == 1 ? indices : slice_axis(n, indices, axis, k, k + 1);
    parts.push_back(n.op1(OpId::kPick, {data, one}, PickAttrs{.axis = axis, .keepdims = true, .mode = TakeMode::kWrap}));
  }
  n.set_output(0, concat(n, parts, axis));
}

// Moves the last axis of `y` (rank `rank`) to `axis`.
ir::Entry last_axis_to(NodeContext& n, ir::Entry y, int axis, int rank) {
  if (axis == rank - 1) return y;
  IntTuple perm;
  for (int d = 0; d < rank - 1; ++d) {
    if (d == axis) perm.push_back(rank - 1);
    perm.push_back(d);
  }
  return n.op1(OpId::kTranspose, {y}, TransposeAttrs{.axes = perm});
}

// OneHot: Kiln's one_hot (classes on the last axis, then moved to `axis`);
// negative indices count from depth.
void convert_one_hot(NodeContext& n) {
  double depth = n.known_doubles(1, "depth").at(0);
  std::vector<double> values = n.known_doubles(2, "values");
  KILN_CHECK(values.size() == 2, ValueError, "values holds {} entries, expected [off, on]", values.size());
  const int rank = n.shape(0).ndim() + 1;
  int axis = normalize_onnx_axis(n, n.attr_int("axis", -1), rank);
  ir::Entry idx = n.input(0);
  ir::Entry negative = n.op1(OpId::kLesserScalar, {idx}, ScalarAttrs{.scalar = 0});
  idx = n.op1(OpId::kBroadcastAdd, {idx, n.op1(OpId::kMulScalar, {negative}, ScalarAttrs{.scalar = std::trunc(depth)})});
  ir::Entry y = n.op1(OpId::kOneHot, {idx}, OneHotAttrs{.depth = static_cast<int64_t>(depth), .on_value = values[1],
                                                          .off_value = values[0], .dtype = n.type(2).dtype});
  n.set_output(0, last_axis_to(n, y, axis, rank));
}

// Hardmax: one-hot of the (first) argmax along `axis` (before opset 13:
// of the input coerced to 2-D at `axis`).
void convert_hardmax(NodeContext& n) {
  const Shape& x = n.shape(0);
  const DType dtype = n.type(0).dtype;
  ir::Entry in = n.input(0);
  if (n.opset() < 13) {
    int axis = normalize_onnx_axis(n, n.attr_int("axis", 1), x.ndim());
    int64_t rows = 1;
    for (int d = 0; d < axis; ++d) rows *= x[d];
    int64_t cols = rows == 0 ? 0 : x.size() / rows;
    ir::Entry arg = n.op1(OpId::kArgmax, {reshape_to(n, in, {rows, cols})}, ArgReduceAttrs{.axis = 1});
    ir::Entry y = n.op1(OpId::kOneHot, {arg}, OneHotAttrs{.depth = cols, .dtype = dtype});
    n.set_output(0, reshape_to(n, y, x.to_vector()));
    return;
  }
  int axis = normalize_onnx_axis(n, n.attr_int("axis", -1), x.ndim());
  ir::Entry arg = n.op1(OpId::kArgmax, {in}, ArgReduceAttrs{.axis = axis});
  ir::Entry y = n.op1(OpId::kOneHot, {arg}, OneHotAttrs{.depth = x[axis], .dtype = dtype});
  n.set_output(0, last_axis_to(n, y, axis, x.ndim()));
}

// Trilu: where(mask, x, 0) with the mask of the last two axes made at import
// (kept: j - i >= k for the upper triangle, j - i <= k for the lower).
void convert_trilu(NodeContext& n) {
  const Shape& x = n.shape(0);
  KILN_CHECK(x.ndim() >= 2, ShapeError, "expected at least 2 axes, got {}", x);
  int64_t k = n.has_input(1) ? n.known_ints(1, "k").at(0) : 0;
  bool upper = n.attr_int("upper", 1) != 0;
  const int64_t rows = x[x.ndim() - 2], cols = x[x.ndim() - 1];
  KILN_CHECK(rows <= kMaxImportElements / std::max<int64_t>(cols, 1), ValueError, "a {}x{} mask is too large", rows, cols);
  std::vector<uint8_t> mask(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) mask[static_cast<size_t>(i * cols + j)] = upper ? j - i >= k : j - i <= k;
  ir::Entry m = n.constant(nd::array(mask, Shape{rows, cols}));
  ir::Entry zero = n.constant(nd::full(Shape{}, 0.0, {x.ndim() ? n.type(0).dtype : DType::kFloat32, Device::cpu(0)}));
  n.set_output(0, n.op1(OpId::kWhere, {m, n.input(0), zero}));
}

KILN_ONNX_CONVERTER("Trilu", convert_trilu);
KILN_ONNX_CONVERTER("OneHot", convert_one_hot);
KILN_ONNX_CONVERTER("Hardmax", convert_hardmax);
KILN_ONNX_CONVERTER("GatherElements", convert_gather_elements);
KILN_ONNX_CONVERTER("Gather", convert_gather);

}  // namespace
}  // namespace kiln::onnx
