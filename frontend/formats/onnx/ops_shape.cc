// ONNX converters of shape and layout ops (Shape, Size, Constant,
// ConstantOfShape, Range, Reshape, Flatten, Transpose, Concat, Squeeze,
// Unsqueeze, Slice, Split, Expand, Tile, DepthToSpace, SpaceToDepth,
// Identity, CastLike). Shapes are concrete when a graph is built, so every
// target shape is computed here and emitted as a fixed Reshape.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include <fmt/ranges.h>

#include "frontend/formats/onnx/node_context.h"
#include "frontend/nd_init.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/reduce.h"

namespace kiln::onnx {
namespace {

NDArray int64_vector(const std::vector<int64_t>& v) {
  return nd::array(v, Shape{static_cast<int64_t>(v.size())});
}

}  // namespace

ir::Entry reshape_to(NodeContext& n, ir::Entry e, const std::vector<int64_t>& dims) {
  if (n.entry_type(e).shape == Shape(dims)) return e;
  return n.op1(OpId::kReshape, {e}, ReshapeAttrs{.shape = IntTuple(dims)});
}

ir::Entry cast_to(NodeContext& n, ir::Entry e, DType t) {
  return n.entry_type(e).dtype == t ? e : n.op1(OpId::kCast, {e}, CastAttrs{.dtype = t});
}

ir::Entry scalar_op(NodeContext& n, OpId id, ir::Entry e, double s) { return n.op1(id, {e}, ScalarAttrs{.scalar = s}); }

ir::Entry slice_axis(NodeContext& n, ir::Entry e, int axis, int64_t begin, int64_t end) {
  return n.op1(OpId::kSliceAxis, {e}, SliceAxisAttrs{.axis = axis, .begin = begin, .end = end});
}

ir::Entry concat(NodeContext& n, const std::vector<ir::Entry>& parts, int axis) {
  if (parts.size() == 1) return parts[0];
  return n.op(OpId::kConcat, parts, OpAttrs::make(ConcatAttrs{.num_args = static_cast<int>(parts.size()), .dim = axis}))
      .front();
}

std::optional<std::vector<int64_t>> axes_of(NodeContext& n, int input_since_opset, size_t input) {
  if (n.opset() < input_since_opset) {
    if (!n.has_attr("axes")) return std::nullopt;
    return n.attr_ints("axes");
  }
  if (!n.has_input(input)) return std::nullopt;
  return n.known_ints(input, "axes");
}

namespace {

void convert_shape(NodeContext& n) {
  const Shape& x = n.shape(0);
  int64_t rank = x.ndim();
  int64_t start = n.attr_int("start", 0), end = n.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  n.set_known(0, int64_vector(std::vector<int64_t>(x.begin() + start, x.begin() + end)));
}

void convert_size(NodeContext& n) {
  std::vector<int64_t> v{n.shape(0).size()};
  n.set_known(0, nd::array(v, Shape{}));
}

void convert_constant(NodeContext& n) {
  if (n.has_attr("value")) {
    n.set_known(0, n.attr_tensor("value"));
  } else if (n.has_attr("value_float")) {
    n.set_known(0, nd::array(std::vector<float>{static_cast<float>(n.attr_float("value_float", 0))}, Shape{}));
  } else if (n.has_attr("value_int")) {
    n.set_known(0, nd::array(std::vector<int64_t>{n.attr_int("value_int", 0)}, Shape{}));
  } else if (n.has_attr("value_floats")) {
    std::vector<float> v;
    for (double d : n.attr_floats("value_floats")) v.push_back(static_cast<float>(d));
    n.set_known(0, nd::array(v, Shape{static_cast<int64_t>(v.size())}));
  } else if (n.has_attr("value_ints")) {
    n.set_known(0, int64_vector(n.attr_ints("value_ints")));
  } else {
    n.unsupported("a Constant without value, value_float(s) or value_int(s) (sparse or string values)");
  }
}

void convert_constant_of_shape(NodeContext& n) {
  std::vector<int64_t> dims = n.known_ints(0, "shape");
  for (int64_t d : dims) KILN_CHECK(d >= 0, ValueError, "negative dim in shape [{}]", fmt::join(dims, ","));
  NDArray value = n.has_attr("value") ? n.attr_tensor("value") : nd::array(std::vector<float>{0.0f}, Shape{1});
  KILN_CHECK(value.size() == 1, ValueError, "value holds {} elements, expected 1", value.size());
  KILN_CHECK(dims.size() <= static_cast<size_t>(Shape::kMaxNdim), NotSupported, "shape [{}] has more than {} dims",
             fmt::join(dims, ","), Shape::kMaxNdim);
  Shape shape(dims);
  KILN_CHECK(shape.size() <= kMaxImportElements, ValueError, "shape {} is too large to fill at import", shape);
  NDArray out = NDArray::empty(shape, {value.dtype(), Device::cpu(0)});
  value.wait_to_read();
  const size_t elem = dtype_size(value.dtype());
  for (int64_t i = 0; i < shape.size(); ++i)
    std::memcpy(static_cast<char*>(out.data()) + static_cast<size_t>(i) * elem, value.data(), elem);
  n.set_known(0, out);
}

void convert_reshape(NodeContext& n) {
  const Shape& x = n.shape(0);
  std::vector<int64_t> spec = n.known_ints(1, "shape");
  bool allow_zero = n.opset() >= 14 && n.attr_int("allowzero", 0) != 0;
  std::vector<int64_t> dims;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allow_zero) {
      KILN_CHECK(static_cast<int>(i) < x.ndim(), ShapeError, "shape [{}] copies dim {} of {}, which has none",
                 fmt::join(spec, ","), i, x);
      d = x[static_cast<int>(i)];
    }
    if (d == -1) {
      KILN_CHECK(infer < 0, ShapeError, "shape [{}] has more than one -1", fmt::join(spec, ","));
      infer = static_cast<int>(i);
      d = 1;
    }
    KILN_CHECK(d >= 0, ShapeError, "shape [{}] has a negative dim", fmt::join(spec, ","));
    dims.push_back(d);
    KILN_CHECK(!__builtin_mul_overflow(known, d, &known), ShapeError, "shape [{}] has more elements than int64 holds",
               fmt::join(spec, ","));
  }
  if (infer >= 0) {
    KILN_CHECK(known > 0 && x.size() % known == 0, ShapeError, "cannot reshape {} to [{}]", x, fmt::join(spec, ","));
    dims[static_cast<size_t>(infer)] = x.size() / known;
  }
  KILN_CHECK(Shape(dims).size() == x.size(), ShapeError, "cannot reshape {} ({} elements) to [{}]", x, x.size(),
             fmt::join(spec, ","));
  if (Shape(dims).size() == 0) {  // an empty result holds no data (and Kiln's Reshape reads 0 as "copy the dim")
    n.set_known(0, NDArray::empty(Shape(dims), {n.type(0).dtype, Device::cpu(0)}));
    return;
  }
  n.set_output(0, reshape_to(n, n.input(0), dims));
}

void convert_flatten(NodeContext& n) {
  const Shape& x = n.shape(0);
  int64_t axis = n.attr_int("axis", 1);
  if (axis < 0) axis += x.ndim();
  KILN_CHECK(axis >= 0 && axis <= x.ndim(), IndexError, "axis {} is out of range for {}", n.attr_int("axis", 1), x);
  int64_t rows = 1;
  for (int d = 0; d < axis; ++d) rows *= x[d];
  n.set_output(0, reshape_to(n, n.input(0), {rows, rows == 0 ? 0 : x.size() / rows}));
}

void convert_transpose(NodeContext& n) {
  const int rank = n.shape(0).ndim();
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  std::iota(perm.rbegin(), perm.rend(), 0);
  perm = n.attr_ints("perm", perm);
  n.set_output(0, n.op1(OpId::kTranspose, {n.input(0)}, TransposeAttrs{.axes = perm}));
}

void convert_concat(NodeContext& n) {
  std::vector<ir::Entry> in;
  for (size_t i = 0; i < n.num_inputs(); ++i)
    if (n.has_input(i)) in.push_back(n.input(i));
  int axis = normalize_onnx_axis(n, n.attr_int("axis", 0), n.shape(0).ndim());
  n.set_output(0, concat(n, in, axis));
}

void convert_squeeze(NodeContext& n) {
  const Shape& x = n.shape(0);
  std::optional<std::vector<int64_t>> axes = axes_of(n, 13);
  std::vector<bool> drop(static_cast<size_t>(x.ndim()), false);
  if (axes) {
    for (int64_t a : *axes) {
      int d = normalize_onnx_axis(n, a, x.ndim());
      KILN_CHECK(x[d] == 1, ShapeError, "cannot squeeze axis {} of {}: its length is not 1", a, x);
      drop[static_cast<size_t>(d)] = true;
    }
  } else {
    for (int d = 0; d < x.ndim(); ++d) drop[static_cast<size_t>(d)] = x[d] == 1;
  }
  std::vector<int64_t> dims;
  for (int d = 0; d < x.ndim(); ++d)
    if (!drop[static_cast<size_t>(d)]) dims.push_back(x[d]);
  n.set_output(0, reshape_to(n, n.input(0), dims));
}

void convert_unsqueeze(NodeContext& n) {
  const Shape& x = n.shape(0);
  std::optional<std::vector<int64_t>> axes = axes_of(n, 13);
  KILN_CHECK(axes.has_value(), ValueError, "axes are required");
  const int rank = x.ndim() + static_cast<int>(axes->size());
  KILN_CHECK(rank <= Shape::kMaxNdim, NotSupported, "rank {} is more than Kiln's {}", rank, Shape::kMaxNdim);
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t a : *axes) {
    int d = normalize_onnx_axis(n, a, rank);
    KILN_CHECK(!inserted[static_cast<size_t>(d)], ValueError, "axes [{}] repeat an axis", fmt::join(*axes, ","));
    inserted[static_cast<size_t>(d)] = true;
  }
  std::vector<int64_t> dims;
  int src = 0;
  for (int d = 0; d < rank; ++d) dims.push_back(inserted[static_cast<size_t>(d)] ? 1 : x[src++]);
  n.set_output(0, reshape_to(n, n.input(0), dims));
}

void convert_slice(NodeContext& n) {
  const Shape& x = n.shape(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset() < 10) {
    starts = n.attr_ints("starts");
    ends = n.attr_ints("ends");
    axes = n.attr_ints("axes");
  } else {
    starts = n.known_ints(1, "starts");
    ends = n.known_ints(2, "ends");
    if (n.has_input(3)) axes = n.known_ints(3, "axes");
    if (n.has_input(4)) steps = n.known_ints(4, "steps");
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  KILN_CHECK(ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size(), ValueError,
             "starts, ends, axes and steps differ in length ({}, {}, {}, {})", starts.size(), ends.size(), axes.size(),
             steps.size());
  std::vector<std::optional<int64_t>> b(static_cast<size_t>(x.ndim())), e(b.size()), s(b.size());
  for (size_t i = 0; i < starts.size(); ++i) {
    auto d = static_cast<size_t>(normalize_onnx_axis(n, axes[i], x.ndim()));
    int64_t len = x[static_cast<int>(d)], step = steps[i];
    KILN_CHECK(step != 0, ValueError, "step 0 on axis {}", axes[i]);
    // ONNX's clamping: negative bounds count from the end, then clamp to the axis
    // ([0, len] for positive steps, [-1, len - 1] for negative ones; -1 is "before 0").
    auto clamp = [&](int64_t v) {
      if (v < 0) v = v < -len ? (step > 0 ? 0 : -1) : v + len;
      return step > 0 ? std::clamp<int64_t>(v, 0, len) : std::clamp<int64_t>(v, -1, len - 1);
    };
    int64_t lo = clamp(starts[i]), hi = clamp(ends[i]);
    b[d] = lo;
    e[d] = hi < 0 ? std::nullopt : std::optional<int64_t>(hi);
    s[d] = step;
  }
  for (size_t d = 0; d < b.size(); ++d) {
    if (!s[d]) s[d] = 1;
  }
  n.set_output(0, n.op1(OpId::kSlice, {n.input(0)},
                        SliceAttrs{.begin = OptIntTuple(b), .end = OptIntTuple(e), .step = OptIntTuple(s)}));
}

void convert_split(NodeContext& n) {
  const Shape& x = n.shape(0);
  int axis = normalize_onnx_axis(n, n.attr_int("axis", 0), x.ndim());
  std::vector<int64_t> sizes;
  if (n.opset() < 13) {
    sizes = n.attr_ints("split");
  } else if (n.has_input(1)) {
    sizes = n.known_ints(1, "split");
  }
  const auto parts = static_cast<int64_t>(n.num_outputs());
  if (sizes.empty()) {
    KILN_CHECK(x[axis] % parts == 0, ShapeError, "axis {} of {} does not split into {} equal parts", axis, x, parts);
    sizes.assign(static_cast<size_t>(parts), x[axis] / parts);
  }
  KILN_CHECK(static_cast<int64_t>(sizes.size()) == parts, ValueError, "split [{}] has {} sizes for {} outputs",
             fmt::join(sizes, ","), sizes.size(), parts);
  KILN_CHECK(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) == x[axis], ShapeError,
             "split [{}] does not add up to axis {} of {}", fmt::join(sizes, ","), axis, x);
  int64_t at = 0;
  ir::Entry in = n.input(0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (n.has_output(i)) {
      n.set_output(i, n.op1(OpId::kSliceAxis, {in},
                            SliceAxisAttrs{.axis = axis, .begin = at, .end = at + sizes[i]}));
    }
    at += sizes[i];
  }
}

void convert_expand(NodeContext& n) {
  std::vector<int64_t> dims = n.known_ints(1, "shape");
  KILN_CHECK(dims.size() <= static_cast<size_t>(Shape::kMaxNdim), NotSupported, "shape [{}] has more than {} dims",
             fmt::join(dims, ","), Shape::kMaxNdim);
  Shape out = broadcast_shapes(n.shape(0), Shape(dims), "Expand");
  ir::Entry x = n.input(0);
  if (out != n.shape(0)) {
    std::vector<int64_t> aligned(static_cast<size_t>(out.ndim() - n.shape(0).ndim()), 1);
    for (int64_t d : n.shape(0)) aligned.push_back(d);
    x = n.op1(OpId::kBroadcastTo, {reshape_to(n, x, aligned)}, BroadcastToAttrs{.shape = out});
  }
  n.set_output(0, x);
}

void convert_identity(NodeContext& n) { n.set_output(0, n.input(0)); }

// Range is computed at import (its inputs are scalars known then, or it is refused).
void convert_range(NodeContext& n) {
  double start = n.known_doubles(0, "start").at(0), limit = n.known_doubles(1, "limit").at(0),
         delta = n.known_doubles(2, "delta").at(0);
  KILN_CHECK(delta != 0, ValueError, "delta is 0");
  double count = std::max(0.0, std::ceil((limit - start) / delta));
  KILN_CHECK(count <= static_cast<double>(kMaxImportElements), ValueError, "Range of {} elements is too large", count);
  std::vector<double> v;
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) v.push_back(start + static_cast<double>(i) * delta);
  n.set_known(0, nd::array(v, Shape{static_cast<int64_t>(v.size())}).astype(n.type(0).dtype));
}

void convert_cast_like(NodeContext& n) {
  DType to = n.type(1).dtype;
  n.set_output(0, cast_to(n, n.input(0), to));
}

// DepthToSpace / SpaceToDepth on [N, C, H, W]: Reshape, Transpose, Reshape.
void convert_depth_to_space(NodeContext& n) {
  const Shape& x = n.shape(0);
  KILN_CHECK(x.ndim() == 4, ShapeError, "expected [N,C,H,W], got {}", x);
  int64_t b = n.attr_int("blocksize", 0), N = x[0], C = x[1], H = x[2], W = x[3];
  KILN_CHECK(b > 0 && C % (b * b) == 0, ShapeError, "blocksize {} does not divide the {} channels of {} into b*b", b, C, x);
  bool crd = n.attr_string("mode", "DCR") == "CRD";
  ir::Entry y = reshape_to(n, n.input(0), crd ? std::vector<int64_t>{N, C / (b * b), b, b, H, W}
                                              : std::vector<int64_t>{N, b, b, C / (b * b), H, W});
  IntTuple perm = crd ? IntTuple{0, 1, 4, 2, 5, 3} : IntTuple{0, 3, 4, 1, 5, 2};
  y = n.op1(OpId::kTranspose, {y}, TransposeAttrs{.axes = perm});
  n.set_output(0, reshape_to(n, y, {N, C / (b * b), H * b, W * b}));
}

void convert_space_to_depth(NodeContext& n) {
  const Shape& x = n.shape(0);
  KILN_CHECK(x.ndim() == 4, ShapeError, "expected [N,C,H,W], got {}", x);
  int64_t b = n.attr_int("blocksize", 0), N = x[0], C = x[1], H = x[2], W = x[3];
  KILN_CHECK(b > 0 && H % b == 0 && W % b == 0, ShapeError, "blocksize {} does not divide H and W of {}", b, x);
  ir::Entry y = reshape_to(n, n.input(0), {N, C, H / b, b, W / b, b});
  y = n.op1(OpId::kTranspose, {y}, TransposeAttrs{.axes = IntTuple{0, 3, 5, 1, 2, 4}});
  n.set_output(0, reshape_to(n, y, {N, C * b * b, H / b, W / b}));
}

// Tile: per repeated axis a length-1 axis before it, broadcast to the
// repeat count and merged (repeats known at import).
void convert_tile(NodeContext& n) {
  const Shape& x = n.shape(0);
  std::vector<int64_t> repeats = n.known_ints(1, "repeats");
  KILN_CHECK(repeats.size() == static_cast<size_t>(x.ndim()), ValueError, "repeats [{}] for rank {}",
             fmt::join(repeats, ","), x.ndim());
  std::vector<int64_t> split, wide, out;
  for (int d = 0; d < x.ndim(); ++d) {
    int64_t r = repeats[static_cast<size_t>(d)];
    KILN_CHECK(r >= 0, ValueError, "negative repeat {}", r);
    if (r != 1) {
      split.push_back(1);
      wide.push_back(r);
    }
    split.push_back(x[d]);
    wide.push_back(x[d]);
    out.push_back(x[d] * r);
  }
  KILN_CHECK(split.size() <= static_cast<size_t>(Shape::kMaxNdim), NotSupported, "tiling {} axes of rank {} needs more than {} dims",
             split.size() - static_cast<size_t>(x.ndim()), x.ndim(), Shape::kMaxNdim);
  if (Shape(out).size() == 0) {
    n.set_known(0, NDArray::empty(Shape(out), {n.type(0).dtype, Device::cpu(0)}));
    return;
  }
  ir::Entry y = reshape_to(n, n.input(0), split);
  if (Shape(wide) != Shape(split)) y = n.op1(OpId::kBroadcastTo, {y}, BroadcastToAttrs{.shape = Shape(wide)});
  n.set_output(0, reshape_to(n, y, out));
}

KILN_ONNX_CONVERTER("Tile", convert_tile);
KILN_ONNX_CONVERTER("Range", convert_range);
KILN_ONNX_CONVERTER("CastLike", convert_cast_like);
KILN_ONNX_CONVERTER("DepthToSpace", convert_depth_to_space);
KILN_ONNX_CONVERTER("SpaceToDepth", convert_space_to_depth);
KILN_ONNX_CONVERTER("Shape", convert_shape);
KILN_ONNX_CONVERTER("Size", convert_size);
KILN_ONNX_CONVERTER("Constant", convert_constant);
KILN_ONNX_CONVERTER("ConstantOfShape", convert_constant_of_shape);
KILN_ONNX_CONVERTER("Reshape", convert_reshape);
KILN_ONNX_CONVERTER("Flatten", convert_flatten);
KILN_ONNX_CONVERTER("Transpose", convert_transpose);
KILN_ONNX_CONVERTER("Concat", convert_concat);
KILN_ONNX_CONVERTER("Squeeze", convert_squeeze);
KILN_ONNX_CONVERTER("Unsqueeze", convert_unsqueeze);
KILN_ONNX_CONVERTER("Slice", convert_slice);
KILN_ONNX_CONVERTER("Split", convert_split);
KILN_ONNX_CONVERTER("Expand", convert_expand);
KILN_ONNX_CONVERTER("Identity", convert_identity);

}  // namespace
}  // namespace kiln::onnx
