// ONNX's Pad as Kiln layout ops, one axis at a time (shapes are concrete when
// a graph is built): constant mode concatenates blocks of the value, edge
// mode broadcast copies of the border row, reflect mode reversed slices;
// negative pads crop. Exact in every mode.
#include <fmt/ranges.h>

#include "frontend/formats/onnx/node_context.h"
#include "frontend/nd_init.h"
#include "ir/ops/matrix.h"

namespace kiln::onnx {
namespace {

// Rows [from, to) of `axis` in reverse order (from > to; to may be -1).
ir::Entry reversed_rows(NodeContext& n, ir::Entry x, int axis, int64_t from, int64_t to) {
  const int rank = n.entry_type(x).shape.ndim();
  std::vector<std::optional<int64_t>> b(static_cast<size_t>(rank)), e(b.size()), s(b.size(), 1);
  b[static_cast<size_t>(axis)] = from;
  e[static_cast<size_t>(axis)] = to < 0 ? std::nullopt : std::optional<int64_t>(to);
  s[static_cast<size_t>(axis)] = -1;
  return n.op1(OpId::kSlice, {x}, SliceAttrs{.begin = OptIntTuple(b), .end = OptIntTuple(e), .step = OptIntTuple(s)});
}

ir::Entry pad_axis(NodeContext& n, ir::Entry x, int axis, int64_t before, int64_t after, const std::string& mode,
                   double value) {
  Shape s = n.entry_type(x).shape;
  const DType dtype = n.entry_type(x).dtype;
  if (before < 0 || after < 0) {  // crop first
    int64_t lo = std::max<int64_t>(0, -before), hi = s[axis] - std::max<int64_t>(0, -after);
    KILN_CHECK(lo <= hi, ShapeError, "negative pads crop more than axis {} of {} holds", axis, s);
    x = slice_axis(n, x, axis, lo, hi);
    s = n.entry_type(x).shape;
    before = std::max<int64_t>(0, before);
    after = std::max<int64_t>(0, after);
  }
  if (before == 0 && after == 0) return x;
  const int64_t len = s[axis];
  auto block = [&](int64_t rows, bool at_start) -> ir::Entry {
    Shape bs = s;
    bs[axis] = rows;
    if (mode == "constant") {
      KILN_CHECK(bs.size() <= kMaxImportElements, ValueError, "padding block {} is too large", bs);
      return n.constant(nd::full(bs, value, {dtype, Device::cpu(0)}));
    }
    if (mode == "edge") {
      KILN_CHECK(len > 0, ShapeError, "edge padding of an empty axis {} of {}", axis, s);
      ir::Entry row = at_start ? slice_axis(n, x, axis, 0, 1) : slice_axis(n, x, axis, len - 1, len);
      return n.op1(OpId::kBroadcastTo, {row}, BroadcastToAttrs{.shape = bs});
    }
    KILN_CHECK(rows < len, ShapeError, "reflect padding of {} on axis {} of {} needs more than {} rows", rows, axis, s,
               len);
    return at_start ? reversed_rows(n, x, axis, rows, 0) : reversed_rows(n, x, axis, len - 2, len - 2 - rows);
  };
  std::vector<ir::Entry> parts;
  if (before > 0) parts.push_back(block(before, true));
  parts.push_back(x);
  if (after > 0) parts.push_back(block(after, false));
  return concat(n, parts, axis);
}

}  // namespace

ir::Entry pad(NodeContext& n, ir::Entry x, const std::vector<int64_t>& pads, const std::string& mode, double value) {
  const int rank = n.entry_type(x).shape.ndim();
  KILN_CHECK(pads.size() == static_cast<size_t>(2 * rank), ValueError, "pads [{}] has {} entries for rank {}",
             fmt::join(pads, ","), pads.size(), rank);
  for (int axis = 0; axis < rank; ++axis)
    x = pad_axis(n, x, axis, pads[static_cast<size_t>(axis)], pads[static_cast<size_t>(axis + rank)], mode, value);
  return x;
}

namespace {

void convert_pad(NodeContext& n) {
  std::string mode = n.attr_string("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect") n.unsupported(fmt::format("mode '{}'", mode));
  std::vector<int64_t> pads;
  double value = 0;
  if (n.opset() < 11) {
    pads = n.attr_ints("pads");
    value = n.attr_float("value", 0.0);
  } else {
    pads = n.known_ints(1, "pads");
    if (n.has_input(2)) value = n.known_doubles(2, "constant_value").at(0);
    if (n.has_input(3)) n.unsupported("the axes input");
  }
  n.set_output(0, pad(n, n.input(0), pads, mode, value));
}

KILN_ONNX_CONVERTER("Pad", convert_pad);

}  // namespace
}  // namespace kiln::onnx
