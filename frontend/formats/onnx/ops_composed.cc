// ONNX ops that Kiln has no op for, composed exactly from Kiln's ops:
// EyeLike (a constant), InstanceNormalization, MeanVarianceNormalization and
// LRN (reductions, sum pooling over channels), CumSum (a triangular matrix
// product), TopK (repeated argmax), GatherND (take of flat indices),
// ScatterND, ScatterElements and Scatter (the scatter-add of take's gradient),
// MaxUnpool (the same scatter), the window functions (constants),
// DequantizeLinear, QuantizeLinear, DynamicQuantizeLinear and MatMulInteger
// (exact in float32 / float64), Einsum
// (diagonals by an identity mask, then one broadcast product and a sum),
// ReverseSequence (take of per-position source rows).
#include <fmt/ranges.h>

#include <cctype>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "frontend/formats/onnx/node_context.h"
#include "frontend/formats/onnx/tensor.h"
#include "frontend/nd_init.h"
#include "ir/ops/conv.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/linalg.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"

namespace kiln::onnx {
namespace {

// The permutation that swaps `axis` with the last axis (its own inverse).
IntTuple swap_last(int axis, int rank) {
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(axis)], perm.back());
  return IntTuple(perm);
}

ir::Entry swap_axis_last(NodeContext& n, ir::Entry e, int axis) {
  const int rank = n.entry_type(e).shape.ndim();
  return axis == rank - 1 ? e : n.op1(OpId::kTranspose, {e}, TransposeAttrs{.axes = swap_last(axis, rank)});
}

// ---- EyeLike: ones on diagonal k of a 2-D shape, in `dtype` (or the input's)

void convert_eye_like(NodeContext& n) {
  const Shape& x = n.shape(0);
  KILN_CHECK(x.ndim() == 2, ShapeError, "expected a 2-D input, got {}", x);
  DType dtype = n.type(0).dtype;
  if (n.has_attr("dtype")) {
    auto to = static_cast<int32_t>(n.attr_int("dtype", 1));
    std::optional<DType> t = dtype_from_onnx(to);
    if (!t) n.unsupported(fmt::format("dtype {}", onnx_dtype_name(to)));
    dtype = *t;
  }
  KILN_CHECK(x.size() <= kMaxImportElements, ValueError, "a {} identity is too large", x);
  const int64_t k = n.attr_int("k", 0);
  std::vector<float> eye(static_cast<size_t>(x.size()), 0.0f);
  for (int64_t i = 0; i < x[0]; ++i)
    if (i + k >= 0 && i + k < x[1]) eye[static_cast<size_t>(i * x[1] + i + k)] = 1.0f;
  n.set_output(0, n.constant(nd::array(eye, x).astype(dtype)));
}

// ---- Normalizations

// InstanceNormalization: each (sample, channel) plane normalized by its own
// mean and biased variance, then scaled and shifted per channel.
void convert_instance_norm(NodeContext& n) {
  const Shape& x = n.shape(0);
  KILN_CHECK(x.ndim() >= 3, ShapeError, "expected data [N,C,D...], got {}", x);
  KILN_CHECK(n.shape(1) == Shape{x[1]} && n.shape(2) == Shape{x[1]}, ShapeError,
             "scale {} and B {} must be [{}] (the channels of {})", n.shape(1), n.shape(2), x[1], x);
  IntTuple axes;
  for (int d = 2; d < x.ndim(); ++d) axes.push_back(d);
  n.set_output(0, normalize_channels(n, n.input(0), axes, n.attr_float("epsilon", 1e-5), n.input(1), n.input(2)).y);
}

// MeanVarianceNormalization, as ONNX's function defines it:
// (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over `axes` (default [0, 2, 3]).
void convert_mvn(NodeContext& n) {
  const int rank = n.shape(0).ndim();
  IntTuple axes;
  for (int64_t a : n.attr_ints("axes", {0, 2, 3})) axes.push_back(normalize_onnx_axis(n, a, rank));
  ReduceAttrs r{.axis = axes, .keepdims = true};
  ir::Entry mean = n.op1(OpId::kMean, {n.input(0)}, r);
  ir::Entry mean_sq = n.op1(OpId::kMean, {n.op1(OpId::kSquare, {n.input(0)})}, r);
  ir::Entry var = n.op1(OpId::kBroadcastSub, {mean_sq, n.op1(OpId::kSquare, {mean})});
  ir::Entry std = scalar_op(n, OpId::kPlusScalar, n.op1(OpId::kSqrt, {var}), 1e-9);
  n.set_output(0, n.op1(OpId::kBroadcastDiv, {n.op1(OpId::kBroadcastSub, {n.input(0), mean}), std}));
}

// LRN: x / (bias + alpha / size * s)^beta, s the sum of squares over the
// channels c - floor((size-1)/2) .. c + ceil((size-1)/2): sum pooling of the
// squares seen as [N, 1, C, rest], the channel axis padded with zeros.
void convert_lrn(NodeContext& n) {
  const Shape& x = n.shape(0);
  KILN_CHECK(x.ndim() >= 2, ShapeError, "expected data [N,C,...], got {}", x);
  KILN_CHECK(is_floating(n.type(0).dtype), TypeError, "LRN of {} data", dtype_name(n.type(0).dtype));
  const int64_t size = n.attr_int("size", 0);
  KILN_CHECK(size >= 1, ValueError, "size must be >= 1, got {}", size);
  const double alpha = n.attr_float("alpha", 1e-4), beta = n.attr_float("beta", 0.75), bias = n.attr_float("bias", 1.0);
  const int64_t rest = x[1] == 0 ? 0 : x.size() / (x[0] * x[1]);
  ir::Entry sq = reshape_to(n, n.op1(OpId::kSquare, {n.input(0)}), {x[0], 1, x[1], rest});
  sq = pad(n, sq, {0, 0, (size - 1) / 2, 0, 0, 0, size / 2, 0}, "constant", 0.0);
  ir::Entry sum = n.op1(OpId::kPooling, {sq}, PoolingAttrs{.kernel = {size, 1}, .pool_type = "sum", .stride = {1, 1}});
  sum = reshape_to(n, sum, x.to_vector());
  ir::Entry denom = scalar_op(n, OpId::kPlusScalar, scalar_op(n, OpId::kMulScalar, sum, alpha / static_cast<double>(size)), bias);
  denom = scalar_op(n, OpId::kPowerScalar, denom, beta);
  n.set_output(0, n.op1(OpId::kBroadcastDiv, {n.input(0), denom}));
}

// ---- CumSum: the axis moved last and multiplied by a 0/1 triangular matrix

void convert_cumsum(NodeContext& n) {
  const Shape& x = n.shape(0);
  const DType dtype = n.type(0).dtype;
  if (!is_floating(dtype)) n.unsupported(fmt::format("CumSum of {} (floating types only)", dtype_name(dtype)));
  KILN_CHECK(x.ndim() >= 1, ShapeError, "CumSum of a scalar");
  std::vector<int64_t> axis_v = n.known_ints(1, "axis");
  KILN_CHECK(axis_v.size() == 1, ShapeError, "axis must hold one value, got {}", axis_v.size());
  const int axis = normalize_onnx_axis(n, axis_v[0], x.ndim());
  const bool exclusive = n.attr_int("exclusive", 0) != 0, reverse = n.attr_int("reverse", 0) != 0;
  const int64_t len = x[axis];
  KILN_CHECK(len <= kMaxImportElements / std::max<int64_t>(len, 1), ValueError, "a CumSum over {} elements needs a {}x{} matrix, too large",
             len, len, len);
  // y[j] = sum of x[i] over i <= j (< j exclusive; >= j, > j reversed): column j of the matrix.
  std::vector<float> tri(static_cast<size_t>(len * len), 0.0f);
  for (int64_t i = 0; i < len; ++i)
    for (int64_t j = 0; j < len; ++j) {
      bool in = reverse ? (exclusive ? i > j : i >= j) : (exclusive ? i < j : i <= j);
      tri[static_cast<size_t>(i * len + j)] = in ? 1.0f : 0.0f;
    }
  ir::Entry y = swap_axis_last(n, n.input(0), axis);
  Shape moved = n.entry_type(y).shape;
  y = reshape_to(n, y, {len == 0 ? 0 : moved.size() / len, len});
  y = n.op1(OpId::kDot, {y, n.constant(nd::array(tri, Shape{len, len}).astype(dtype))}, DotAttrs{});
  y = reshape_to(n, y, moved.to_vector());
  n.set_output(0, swap_axis_last(n, y, axis));
}

// ---- TopK: k rounds of argmax (argmin for the smallest) along the axis,
// each round masking its winner with -inf (+inf); argmax returns the first
// extremum, so equal values come in index order as ONNX asks. 16-bit data
// runs in float32 (its indices would not all be exact in bfloat16). The one
// inexact case: data that holds the masking value itself (-inf among the
// largest, +inf among the smallest, or an integer type's extreme), whose
// index may be reported for an already chosen position.
constexpr int64_t kMaxTopK = 256;

void convert_top_k(NodeContext& n) {
  const Shape& x = n.shape(0);
  KILN_CHECK(x.ndim() >= 1, ShapeError, "TopK of a scalar");
  const int axis = normalize_onnx_axis(n, n.attr_int("axis", -1), x.ndim());
  std::vector<int64_t> kv = n.opset() >= 10 ? n.known_ints(1, "K") : std::vector<int64_t>{n.attr_int("k", 0)};
  KILN_CHECK(kv.size() == 1, ShapeError, "K must hold one value, got {}", kv.size());
  const int64_t k = kv[0];
  KILN_CHECK(k >= 0 && k <= x[axis], ValueError, "K {} is outside [0, {}] (axis {} of {})", k, x[axis], axis, x);
  if (k > kMaxTopK) n.unsupported(fmt::format("K {} (at most {})", k, kMaxTopK));
  KILN_CHECK(k > 0, NotSupported, "K 0 (an empty output)");
  const bool largest = n.opset() < 11 || n.attr_int("largest", 1) != 0;
  const DType dtype = n.type(0).dtype;
  const DType work = dtype == DType::kFloat16 || dtype == DType::kBfloat16 ? DType::kFloat32 : dtype;
  double mask_value = largest ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  if (!is_floating(work)) {
    mask_value = dispatch_dtype(work, [&](auto tag) -> double {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>)
        return static_cast<double>(largest ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
      else
        return 0.0;
    });
  }
  const int last = x.ndim() - 1;
  ir::Entry data = swap_axis_last(n, cast_to(n, n.input(0), work), axis);
  ir::Entry mask_fill = n.constant(nd::full(Shape{}, mask_value, {work, Device::cpu(0)}));
  ir::Entry cur = data;
  const Shape moved = n.entry_type(data).shape;
  const std::vector<int64_t> lead(moved.begin(), moved.end() - 1);  // the shape without the axis
  std::vector<ir::Entry> values, indices;
  for (int64_t t = 0; t < k; ++t) {
    ir::Entry idx = n.op1(largest ? OpId::kArgmax : OpId::kArgmin, {cur}, ArgReduceAttrs{.axis = last, .keepdims = true});
    values.push_back(n.op1(OpId::kPick, {data, idx}, PickAttrs{.axis = last, .keepdims = true}));
    indices.push_back(cast_to(n, idx, DType::kInt64));
    if (t + 1 == k) break;
    ir::Entry chosen = n.op1(OpId::kOneHot, {reshape_to(n, idx, lead)}, OneHotAttrs{.depth = x[axis], .dtype = DType::kUint8});
    cur = n.op1(OpId::kWhere, {chosen, mask_fill, cur});
  }
  auto join = [&](std::vector<ir::Entry>& parts) {
    return swap_axis_last(n, concat(n, parts, last), axis);
  };
  n.set_output(0, cast_to(n, join(values), dtype));
  if (n.has_output(1)) n.set_output(1, join(indices));
}

// ---- Flat indices into data seen as [prod(leading q axes), rest]

// For index tuples `idx` [..., q] (int64) into the first q axes of `dims`,
// each tuple's row-major flat index [...]; negative entries count from the end.
ir::Entry flat_index(NodeContext& n, ir::Entry idx, const std::vector<int64_t>& dims) {
  const auto q = static_cast<int64_t>(dims.size());
  std::vector<int64_t> extent(dims), stride(dims.size(), 1);
  for (int64_t i = q - 2; i >= 0; --i) stride[static_cast<size_t>(i)] = stride[static_cast<size_t>(i + 1)] * dims[static_cast<size_t>(i + 1)];
  ir::Entry negative = cast_to(n, scalar_op(n, OpId::kLesserScalar, idx, 0), DType::kInt64);
  idx = n.op1(OpId::kBroadcastAdd, {idx, n.op1(OpId::kBroadcastMul, {negative, n.constant(nd::array(extent, Shape{q}))})});
  ir::Entry weighted = n.op1(OpId::kBroadcastMul, {idx, n.constant(nd::array(stride, Shape{q}))});
  const int rank = n.entry_type(weighted).shape.ndim();
  return n.op1(OpId::kSum, {weighted}, ReduceAttrs{.axis = IntTuple{rank - 1}});
}

// GatherND: data [B..., D_1..D_q, rest...] and indices [B..., M..., q]
// (B: the batch_dims leading axes): each tuple's flat index (plus its batch's
// offset) taken from data seen as [prod(B) * prod(D), prod(rest)].
void convert_gather_nd(NodeContext& n) {
  const Shape& x = n.shape(0);
  const Shape& ix = n.shape(1);
  KILN_CHECK(is_integral(n.type(1).dtype), TypeError, "indices must be integers, got {}", dtype_name(n.type(1).dtype));
  const int b = static_cast<int>(n.attr_int("batch_dims", 0));
  KILN_CHECK(ix.ndim() >= 1 && b >= 0 && b < ix.ndim() && b < x.ndim(), ValueError,
             "batch_dims {} with data {} and indices {}", b, x, ix);
  const int64_t q = ix[ix.ndim() - 1];
  KILN_CHECK(q >= 1 && b + q <= x.ndim(), ShapeError, "index tuples of {} entries for data {} with batch_dims {}", q, x, b);
  for (int d = 0; d < b; ++d) KILN_CHECK(x[d] == ix[d], ShapeError, "batch axis {} differs: data {}, indices {}", d, x, ix);
  std::vector<int64_t> dims(x.begin() + b, x.begin() + b + q), out;
  int64_t batches = 1, cells = 1, rest = 1;
  for (int d = 0; d < b; ++d) batches *= x[d];
  for (int64_t d : dims) cells *= d;
  for (int d = b + static_cast<int>(q); d < x.ndim(); ++d) rest *= x[d];
  ir::Entry flat = flat_index(n, cast_to(n, n.input(1), DType::kInt64), dims);  // [B..., M...]
  if (b > 0) {
    std::vector<int64_t> offset(static_cast<size_t>(batches)), offset_shape(ix.begin(), ix.begin() + b);
    for (int64_t i = 0; i < batches; ++i) offset[static_cast<size_t>(i)] = i * cells;
    offset_shape.resize(static_cast<size_t>(ix.ndim() - 1), 1);
    flat = n.op1(OpId::kBroadcastAdd, {flat, n.constant(nd::array(offset, Shape(offset_shape)))});
  }
  ir::Entry table = reshape_to(n, n.input(0), {batches * cells, rest});
  ir::Entry y = n.op1(OpId::kTake, {table, flat}, TakeAttrs{.axis = 0, .mode = TakeMode::kClip});
  out.assign(ix.begin(), ix.end() - 1);
  for (int d = b + static_cast<int>(q); d < x.ndim(); ++d) out.push_back(x[d]);
  n.set_output(0, reshape_to(n, y, out));
}

// ---- Scatters: rows of `updates` [count, rest] written into data seen as
// [rows, rest] at flat row indices `flat` [count] (clipped to the rows, as
// take's are). _backward_take adds every update into its row (so "add" is
// data + that); "none" takes the added updates where a row received any
// (exact when no row is indexed twice: ONNX leaves duplicates undefined for
// ScatterND and reports the last for ScatterElements, where Kiln gives their
// sum). "mul" multiplies each row by all of its updates, as ONNX's reference
// does for duplicates too: a one-hot [count, rows, 1] picks update i for row
// flat[i] and 1 elsewhere, the product over the updates multiplies data; the
// [count, rows, rest] block is bounded by kMaxImportElements. The other
// reductions are NotSupported. Floating data only (the scatter-add's types).
ir::Entry scatter_rows(NodeContext& n, ir::Entry data2d, ir::Entry flat, ir::Entry updates2d, const std::string& reduction) {
  const Shape rows = n.entry_type(data2d).shape;
  const DType dtype = n.entry_type(data2d).dtype;
  if (!is_floating(dtype)) n.unsupported(fmt::format("scattering {} data (floating types only)", dtype_name(dtype)));
  const int64_t count = n.entry_type(flat).shape.size();
  if (reduction == "mul") {
    const int64_t r = std::max<int64_t>(rows[0], 1), c = std::max<int64_t>(rows[1], 1);
    KILN_CHECK(count <= kMaxImportElements / r && count * r <= kMaxImportElements / c, ValueError,
               "reduction 'mul' of {} updates into {} rows of {} needs a block of more than {} elements, too large",
               count, rows[0], rows[1], kMaxImportElements);
    ir::Entry at = n.op1(OpId::kClip, {reshape_to(n, flat, {count, 1})},
                         ClipAttrs{.a_min = 0, .a_max = static_cast<double>(std::max<int64_t>(rows[0] - 1, 0))});
    std::vector<int64_t> row_ids(static_cast<size_t>(rows[0]));
    std::iota(row_ids.begin(), row_ids.end(), int64_t{0});
    ir::Entry hot = n.op1(OpId::kBroadcastEqual, {at, n.constant(nd::array(row_ids, Shape{1, rows[0]}))});
    ir::Entry picked =
        n.op1(OpId::kWhere, {reshape_to(n, hot, {count, rows[0], 1}), reshape_to(n, updates2d, {count, 1, rows[1]}),
                             n.constant(nd::ones(Shape{1, 1, 1}).astype(dtype))});
    ir::Entry product = n.op1(OpId::kProd, {picked}, ReduceAttrs{.axis = IntTuple{0}});
    return n.op1(OpId::kBroadcastMul, {data2d, product});
  }
  if (reduction != "none" && reduction != "add") n.unsupported(fmt::format("reduction '{}'", reduction));
  TakeBackwardAttrs a{.axis = 0, .mode = TakeMode::kClip, .data_shape = rows};
  ir::Entry added = n.op1(OpId::kTakeBackward, {updates2d, flat}, a);
  if (reduction == "add") return n.op1(OpId::kBroadcastAdd, {data2d, added});
  ir::Entry ones = n.constant(nd::ones(Shape{count, 1}).astype(dtype));
  ir::Entry hits = n.op1(OpId::kTakeBackward, {ones, flat}, TakeBackwardAttrs{.axis = 0, .mode = TakeMode::kClip, .data_shape = Shape{rows[0], 1}});
  return n.op1(OpId::kWhere, {n.op1(OpId::kBroadcastTo, {hits}, BroadcastToAttrs{.shape = rows}), added, data2d});
}

std::string reduction_of(NodeContext& n) { return n.opset() >= 16 ? n.attr_string("reduction", "none") : "none"; }

// ScatterND: data [D_1..D_q, rest...], indices [M..., q], updates [M..., rest...].
void convert_scatter_nd(NodeContext& n) {
  const Shape& x = n.shape(0);
  const Shape& ix = n.shape(1);
  KILN_CHECK(is_integral(n.type(1).dtype), TypeError, "indices must be integers, got {}", dtype_name(n.type(1).dtype));
  KILN_CHECK(ix.ndim() >= 1, ShapeError, "indices must have an axis of index tuples, got {}", ix);
  const int64_t q = ix[ix.ndim() - 1];
  KILN_CHECK(q >= 1 && q <= x.ndim(), ShapeError, "index tuples of {} entries for data {}", q, x);
  std::vector<int64_t> dims(x.begin(), x.begin() + q);
  int64_t cells = 1, rest = 1, count = 1;
  for (int64_t d : dims) cells *= d;
  for (int d = static_cast<int>(q); d < x.ndim(); ++d) rest *= x[d];
  for (int d = 0; d + 1 < ix.ndim(); ++d) count *= ix[d];
  ir::Entry flat = reshape_to(n, flat_index(n, cast_to(n, n.input(1), DType::kInt64), dims), {count});
  ir::Entry y = scatter_rows(n, reshape_to(n, n.input(0), {cells, rest}), flat, reshape_to(n, n.input(2), {count, rest}),
                             reduction_of(n));
  n.set_output(0, reshape_to(n, y, x.to_vector()));
}

// ScatterElements (and opset-10 Scatter): data, indices and updates of one
// rank; updates[p] goes to data at p with axis `axis` replaced by indices[p].
// Each element's flat index into data: a constant for p's other coordinates
// plus the (wrapped) index times the axis's stride.
void convert_scatter_elements(NodeContext& n) {
  const Shape& x = n.shape(0);
  const Shape& ix = n.shape(1);
  KILN_CHECK(is_integral(n.type(1).dtype), TypeError, "indices must be integers, got {}", dtype_name(n.type(1).dtype));
  KILN_CHECK(ix.ndim() == x.ndim() && n.shape(2) == ix, ShapeError, "data {}, indices {} and updates {} must share a rank, "
             "indices and updates a shape", x, ix, n.shape(2));
  const int axis = normalize_onnx_axis(n, n.attr_int("axis", 0), x.ndim());
  KILN_CHECK(ix.size() <= kMaxImportElements, ValueError, "indices {} are too many", ix);
  const auto stride = x.strides();
  std::vector<int64_t> base(static_cast<size_t>(ix.size()));
  for (int64_t p = 0; p < ix.size(); ++p) {
    int64_t rest = p, at = 0;
    for (int d = ix.ndim() - 1; d >= 0; --d) {
      if (d != axis) at += (rest % ix[d]) * stride[static_cast<size_t>(d)];
      KILN_CHECK(d == axis || ix[d] <= x[d], ShapeError, "indices {} exceed data {} on axis {}", ix, x, d);
      rest /= ix[d];
    }
    base[static_cast<size_t>(p)] = at;
  }
  ir::Entry idx = cast_to(n, n.input(1), DType::kInt64);
  ir::Entry negative = cast_to(n, scalar_op(n, OpId::kLesserScalar, idx, 0), DType::kInt64);
  idx = n.op1(OpId::kBroadcastAdd, {idx, scalar_op(n, OpId::kMulScalar, negative, static_cast<double>(x[axis]))});
  ir::Entry flat = n.op1(OpId::kBroadcastAdd, {scalar_op(n, OpId::kMulScalar, idx, static_cast<double>(stride[static_cast<size_t>(axis)])),
                                               n.constant(nd::array(base, ix))});
  ir::Entry y = scatter_rows(n, reshape_to(n, n.input(0), {x.size(), 1}), reshape_to(n, flat, {ix.size()}),
                             reshape_to(n, n.input(2), {ix.size(), 1}), n.op_type() == "Scatter" ? "none" : reduction_of(n));
  n.set_output(0, reshape_to(n, y, x.to_vector()));
}

// MaxUnpool: X placed at the flat indices I (into the whole unpooled tensor,
// as MaxPool's Indices count) of zeros shaped by the pooling geometry
// ((in - 1) * stride - pads + kernel); a larger output_shape pads that with
// zeros at the end of each spatial axis, as ONNX's reference does. Indices
// repeated (from overlapping windows) carry the same value: the sum over
// them is divided by their count.
void convert_max_unpool(NodeContext& n) {
  const Shape& x = n.shape(0);
  KILN_CHECK(x.ndim() >= 3 && n.shape(1) == x, ShapeError, "X {} and I {} must be [N,C,spatial...] alike", x, n.shape(1));
  KILN_CHECK(is_integral(n.type(1).dtype), TypeError, "I must be integers, got {}", dtype_name(n.type(1).dtype));
  const DType dtype = n.type(0).dtype;
  if (!is_floating(dtype)) n.unsupported(fmt::format("MaxUnpool of {} (floating types only)", dtype_name(dtype)));
  const auto nsp = static_cast<size_t>(x.ndim() - 2);
  std::vector<int64_t> kernel = n.attr_ints("kernel_shape");
  std::vector<int64_t> stride = n.attr_ints("strides", std::vector<int64_t>(nsp, 1));
  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
  KILN_CHECK(kernel.size() == nsp && stride.size() == nsp && pads.size() == 2 * nsp, ValueError,
             "kernel_shape [{}], strides [{}] and pads [{}] for {} spatial axes", fmt::join(kernel, ","),
             fmt::join(stride, ","), fmt::join(pads, ","), nsp);
  auto within = [](int64_t v, int64_t lo) { return v >= lo && v <= kMaxImportElements; };
  KILN_CHECK(std::all_of(x.begin() + 2, x.end(), [&](int64_t v) { return within(v, 0); }), ValueError,
             "X {} has a spatial axis above {}", x, kMaxImportElements);
  KILN_CHECK(std::ranges::all_of(kernel, [&](int64_t v) { return within(v, 1); }) &&
                 std::ranges::all_of(stride, [&](int64_t v) { return within(v, 1); }) &&
                 std::ranges::all_of(pads, [&](int64_t v) { return within(v, 0); }),
             ValueError, "kernel_shape [{}] and strides [{}] must lie in [1, {}], pads [{}] in [0, {}]",
             fmt::join(kernel, ","), fmt::join(stride, ","), kMaxImportElements, fmt::join(pads, ","),
             kMaxImportElements);
  std::vector<int64_t> unpooled{x[0], x[1]};
  for (size_t i = 0; i < nsp; ++i)
    unpooled.push_back((x[2 + static_cast<int>(i)] - 1) * stride[i] - pads[i] - pads[i + nsp] + kernel[i]);
  const Shape full(unpooled);
  KILN_CHECK(full.size() <= kMaxImportElements * 16, ValueError, "output {} is too large", full);
  ir::Entry flat = reshape_to(n, cast_to(n, n.input(1), DType::kInt64), {x.size()});
  TakeBackwardAttrs a{.axis = 0, .mode = TakeMode::kClip, .data_shape = Shape{full.size(), 1}};
  ir::Entry added = n.op1(OpId::kTakeBackward, {reshape_to(n, n.input(0), {x.size(), 1}), flat}, a);
  ir::Entry hits = n.op1(OpId::kTakeBackward, {n.constant(nd::ones(Shape{x.size(), 1}).astype(dtype)), flat}, a);
  ir::Entry y = reshape_to(n, n.op1(OpId::kBroadcastDiv, {added, scalar_op(n, OpId::kMaximumScalar, hits, 1.0)}), unpooled);
  if (n.has_input(2)) {
    std::vector<int64_t> out = n.known_ints(2, "output_shape");
    KILN_CHECK(out.size() == unpooled.size() && out[0] == x[0] && out[1] == x[1], ShapeError,
               "output_shape [{}] for X {}", fmt::join(out, ","), x);
    std::vector<int64_t> grow(2 * unpooled.size(), 0);
    for (size_t d = 2; d < unpooled.size(); ++d) {
      KILN_CHECK(out[d] >= unpooled[d], ShapeError, "output_shape [{}] is smaller than the unpooled {}",
                 fmt::join(out, ","), full);
      grow[unpooled.size() + d] = out[d] - unpooled[d];
    }
    if (Shape(out) != full) y = pad(n, y, grow, "constant", 0.0);
  }
  n.set_output(0, y);
}

// HannWindow, HammingWindow, BlackmanWindow: constants of `size` (known at
// import) in output_datatype; periodic (default) divides the phase by size,
// symmetric by size - 1.
template <int kKind>  // 0 Hann, 1 Hamming, 2 Blackman
void convert_window(NodeContext& n) {
  std::vector<int64_t> sv = n.known_ints(0, "size");
  KILN_CHECK(sv.size() == 1 && sv[0] >= 0 && sv[0] <= kMaxImportElements, ValueError, "size must be one value in [0, {}]",
             kMaxImportElements);
  const int64_t size = sv[0];
  auto to = static_cast<int32_t>(n.attr_int("output_datatype", 1));
  std::optional<DType> dtype = dtype_from_onnx(to);
  if (!dtype) n.unsupported(fmt::format("output_datatype {}", onnx_dtype_name(to)));
  const bool periodic = n.attr_int("periodic", 1) != 0;
  const double span = static_cast<double>(periodic ? size : size - 1), pi = std::acos(-1.0);
  std::vector<double> w(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const double phase = span > 0 ? 2 * pi * static_cast<double>(i) / span : 0.0;
    if constexpr (kKind == 0) w[static_cast<size_t>(i)] = 0.5 - 0.5 * std::cos(phase);
    if constexpr (kKind == 1) w[static_cast<size_t>(i)] = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(phase);
    if constexpr (kKind == 2) w[static_cast<size_t>(i)] = 0.42 - 0.5 * std::cos(phase) + 0.08 * std::cos(2 * phase);
  }
  n.set_output(0, n.constant(nd::array(w, Shape{size}).astype(*dtype)));
}

// A scale or zero point (input i) of DequantizeLinear / QuantizeLinear as `t`:
// a scalar per tensor, or a 1-D one per slice of x along `axis` (shaped to
// broadcast against x).
ir::Entry quantize_param(NodeContext& n, size_t i, DType t) {
  const Shape& x = n.shape(0);
  ir::Entry e = cast_to(n, n.input(i), t);
  const Shape& s = n.shape(i);
  if (s.ndim() == 0 || s.size() == 1) return reshape_to(n, e, {});
  KILN_CHECK(s.ndim() == 1 && x.ndim() >= 1, ShapeError, "input {} must be a scalar or 1-D, got {}", i, s);
  const int axis = normalize_onnx_axis(n, n.attr_int("axis", 1), x.ndim());
  KILN_CHECK(s[0] == x[axis], ShapeError, "input {} {} must match axis {} of x {}", i, s, axis, x);
  std::vector<int64_t> dims(static_cast<size_t>(x.ndim()), 1);
  dims[static_cast<size_t>(axis)] = s[0];
  return reshape_to(n, e, dims);
}

// DequantizeLinear: (x - zero_point) * scale in float32, the scale (and
// zero point) per tensor or per slice along `axis`; x and the zero point
// converted to float32 first, as ONNX's reference does.
void convert_dequantize_linear(NodeContext& n) {
  ir::Entry y = cast_to(n, n.input(0), DType::kFloat32);
  if (n.has_input(2)) y = n.op1(OpId::kBroadcastSub, {y, quantize_param(n, 2, DType::kFloat32)});
  n.set_output(0, n.op1(OpId::kBroadcastMul, {y, quantize_param(n, 1, DType::kFloat32)}));
}

// The integer range that QuantizeLinear saturates to (ONNX's 8-bit outputs
// and the 16-bit ones of later opsets); nullopt for the others.
std::optional<std::pair<double, double>> quantized_range(DType t) {
  switch (t) {
    case DType::kUint8:
      return std::pair{0.0, 255.0};
    case DType::kInt8:
      return std::pair{-128.0, 127.0};
    case DType::kUint16:
      return std::pair{0.0, 65535.0};
    case DType::kInt16:
      return std::pair{-32768.0, 32767.0};
    default:
      return std::nullopt;
  }
}

// saturate(rint(x / scale) + zero_point) as `out`, ONNX's reference: the
// quotient and its rounding (half to even) in x's floating dtype (float64
// for integer x, as NumPy promotes int32 / float32), then the zero point
// added and the range clipped in float64, which holds every such value, and
// the (integral, in-range) result cast. `scale` and `zero_point` (float64, or
// none) broadcast against x.
ir::Entry quantize(NodeContext& n, ir::Entry x, ir::Entry scale, std::optional<ir::Entry> zero_point, DType out) {
  const auto range = quantized_range(out);
  if (!range) n.unsupported(fmt::format("quantizing to {}", dtype_name(out)));
  const DType in = n.entry_type(x).dtype;
  const DType compute = is_floating(in) ? in : DType::kFloat64;
  ir::Entry q = n.op1(OpId::kBroadcastDiv, {cast_to(n, x, compute), cast_to(n, scale, compute)});
  q = cast_to(n, n.op1(OpId::kRint, {q}), DType::kFloat64);
  if (zero_point) q = n.op1(OpId::kBroadcastAdd, {q, cast_to(n, *zero_point, DType::kFloat64)});
  q = n.op1(OpId::kClip, {q}, ClipAttrs{.a_min = range->first, .a_max = range->second});
  return cast_to(n, q, out);
}

// QuantizeLinear (opsets 10 and 13): the scale (and zero point) per tensor
// or per slice along `axis`; the output has the zero point's dtype, else
// uint8.
void convert_quantize_linear(NodeContext& n) {
  const DType in = n.type(0).dtype;
  KILN_CHECK(is_floating(in) || in == DType::kInt32, TypeError, "x must be floating or int32, got {}", dtype_name(in));
  std::optional<ir::Entry> zero_point;
  if (n.has_input(2)) zero_point = quantize_param(n, 2, DType::kFloat64);
  const DType compute = is_floating(in) ? in : DType::kFloat64;
  n.set_output(0, quantize(n, n.input(0), quantize_param(n, 1, compute), zero_point,
                           n.has_input(2) ? n.type(2).dtype : DType::kUint8));
}

// DynamicQuantizeLinear (float32 to uint8), ONNX's reference: the range
// [min(x, 0), max(x, 0)] spread over 0..255 (scale (max - min) / 255, or
// 1 / 255 when max == min, all in float32), zero point rint(clip(-min /
// scale, 0, 255)), then QuantizeLinear's rounding and saturation.
void convert_dynamic_quantize_linear(NodeContext& n) {
  KILN_CHECK(n.type(0).dtype == DType::kFloat32, TypeError, "x must be float32, got {}", dtype_name(n.type(0).dtype));
  ir::Entry x = n.input(0);
  ir::Entry lo = scalar_op(n, OpId::kMinimumScalar, n.op1(OpId::kMin, {x}, ReduceAttrs{}), 0.0);
  ir::Entry hi = scalar_op(n, OpId::kMaximumScalar, n.op1(OpId::kMax, {x}, ReduceAttrs{}), 0.0);
  ir::Entry span = n.op1(OpId::kBroadcastSub, {hi, lo});
  span = n.op1(OpId::kBroadcastAdd, {span, scalar_op(n, OpId::kEqualScalar, span, 0.0)});  // 0 -> 1
  ir::Entry scale = scalar_op(n, OpId::kDivScalar, span, 255.0);
  ir::Entry zero = n.op1(OpId::kNegative, {n.op1(OpId::kBroadcastDiv, {lo, scale})});
  zero = n.op1(OpId::kRint, {n.op1(OpId::kClip, {zero}, ClipAttrs{.a_min = 0.0, .a_max = 255.0})});
  n.set_output(0, quantize(n, x, scale, zero, DType::kUint8));
  n.set_output(1, scale);
  n.set_output(2, cast_to(n, zero, DType::kUint8));
}

// MatMulInteger of 2-D operands: (A - a_zero_point) x (B - b_zero_point) in
// float64, exact for 8-bit operands (each product below 2^17, so sums of up
// to 2^36 of them), converted to int32.
void convert_matmul_integer(NodeContext& n) {
  const Shape& a = n.shape(0);
  const Shape& b = n.shape(1);
  if (a.ndim() != 2 || b.ndim() != 2) n.unsupported(fmt::format("MatMulInteger of {} and {} (2-D operands only)", a, b));
  KILN_CHECK(a[1] == b[0], ShapeError, "A {} and B {} do not chain", a, b);
  ir::Entry lhs = cast_to(n, n.input(0), DType::kFloat64), rhs = cast_to(n, n.input(1), DType::kFloat64);
  if (n.has_input(2)) {  // scalar, or one per row of A
    ir::Entry zp = cast_to(n, n.input(2), DType::kFloat64);
    lhs = n.op1(OpId::kBroadcastSub, {lhs, reshape_to(n, zp, n.shape(2).size() == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{a[0], 1})});
  }
  if (n.has_input(3)) {  // scalar, or one per column of B
    ir::Entry zp = cast_to(n, n.input(3), DType::kFloat64);
    rhs = n.op1(OpId::kBroadcastSub, {rhs, reshape_to(n, zp, n.shape(3).size() == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{1, b[1]})});
  }
  n.set_output(0, cast_to(n, n.op1(OpId::kDot, {lhs, rhs}, DotAttrs{}), DType::kInt32));
}

// Einsum: each operand's repeated letters (diagonals) are reduced by an
// identity mask and a sum; the operands are then laid out on one axis order
// (output letters, then the summed ones, length 1 where a letter is absent),
// multiplied with broadcasting and summed over the letters the output lacks.
// "..." stands for the leading axes (right-aligned, broadcast). The product
// holds every letter's extent at once: at most kMaxEinsumElements elements.
constexpr int64_t kMaxEinsumElements = int64_t{1} << 26;

void convert_einsum(NodeContext& n) {
  std::string eq;
  for (char c : n.attr_string("equation", "")) {
    if (c != ' ') eq.push_back(c);
  }
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t at = 0;;) {
    const size_t comma = lhs.find(',', at);
    terms.push_back(lhs.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  KILN_CHECK(terms.size() == n.num_inputs(), ValueError, "equation '{}' has {} operands, the node {}", eq, terms.size(),
             n.num_inputs());
  // "..." becomes upper-case letters (the equation's own are lower-case or upper-case: checked unused).
  int ellipsis_rank = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const size_t dots = terms[i].find("...");
    if (dots == std::string::npos) continue;
    ellipsis_rank = std::max(ellipsis_rank, n.shape(i).ndim() - static_cast<int>(terms[i].size() - 3));
  }
  std::string ell;
  for (char c = 'A'; static_cast<int>(ell.size()) < ellipsis_rank && c <= 'Z'; ++c) {
    if (eq.find(c) == std::string::npos) ell.push_back(c);
  }
  KILN_CHECK(static_cast<int>(ell.size()) == ellipsis_rank, NotSupported, "equation '{}': too many axes under '...'", eq);
  std::map<char, int64_t> extent;
  std::vector<ir::Entry> ops;
  std::vector<std::string> labels;
  for (size_t i = 0; i < terms.size(); ++i) {
    std::string t = terms[i];
    const Shape& s = n.shape(i);
    if (size_t dots = t.find("..."); dots != std::string::npos) {
      const int k = s.ndim() - static_cast<int>(t.size() - 3);
      KILN_CHECK(k >= 0, ShapeError, "operand {} {} has fewer axes than '{}'", i, s, terms[i]);
      t = t.substr(0, dots) + ell.substr(ell.size() - static_cast<size_t>(k)) + t.substr(dots + 3);
    }
    KILN_CHECK(static_cast<int>(t.size()) == s.ndim(), ShapeError, "operand {} {} does not have the {} axes of '{}'", i, s,
               t.size(), terms[i]);
    ir::Entry e = n.input(i);
    for (int d = 0; d < s.ndim(); ++d) {
      KILN_CHECK(std::isalpha(static_cast<unsigned char>(t[static_cast<size_t>(d)])), ValueError,
                 "equation '{}': '{}' is not a letter", eq, t[static_cast<size_t>(d)]);
    }
    // Diagonals: the second of two equal letters is folded into the first.
    for (size_t q = 1; q < t.size(); ++q) {
      const size_t p = t.find(t[q]);
      if (p == q) continue;
      Shape cur = n.entry_type(e).shape;
      KILN_CHECK(cur[static_cast<int>(p)] == cur[static_cast<int>(q)], ShapeError, "operand {} {}: '{}' has extents {} and {}",
                 i, s, t[q], cur[static_cast<int>(p)], cur[static_cast<int>(q)]);
      const int64_t len = cur[static_cast<int>(p)];
      KILN_CHECK(len <= kMaxImportElements / std::max<int64_t>(len, 1), ValueError,
                 "equation '{}': the diagonal of '{}' needs a {}x{} mask, too large", eq, t[q], len, len);
      std::vector<float> eye(static_cast<size_t>(len * len), 0.0f);
      for (int64_t j = 0; j < len; ++j) eye[static_cast<size_t>(j * len + j)] = 1.0f;
      std::vector<int64_t> eye_shape(static_cast<size_t>(cur.ndim()), 1);
      eye_shape[p] = len;
      eye_shape[q] = len;
      ir::Entry mask = n.constant(nd::array(eye, Shape(eye_shape)).astype(n.entry_type(e).dtype));
      e = n.op1(OpId::kSum, {n.op1(OpId::kBroadcastMul, {e, mask})}, ReduceAttrs{.axis = IntTuple{static_cast<int64_t>(q)}});
      t.erase(q, 1);
      --q;
    }
    const Shape cur = n.entry_type(e).shape;
    for (size_t d = 0; d < t.size(); ++d) {
      const int64_t len = cur[static_cast<int>(d)];
      auto [it, fresh] = extent.emplace(t[d], len);
      if (!fresh && it->second != len) {
        KILN_CHECK(it->second == 1 || len == 1, ShapeError, "equation '{}': '{}' has extents {} and {}", eq, t[d], it->second, len);
        it->second = std::max(it->second, len);
      }
    }
    ops.push_back(e);
    labels.push_back(t);
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (size_t dots = out.find("..."); dots != std::string::npos) out = out.substr(0, dots) + ell + out.substr(dots + 3);
  } else {  // implicit: "..." first, then the letters used once, in alphabetical order
    std::map<char, int> uses;
    for (const std::string& t : labels)
      for (char c : t) uses[c] += ell.find(c) == std::string::npos ? 1 : 0;
    out = ell;
    for (auto [c, k] : uses)
      if (k == 1) out.push_back(c);
  }
  std::string order = out;
  for (auto [c, len] : extent)
    if (order.find(c) == std::string::npos) order.push_back(c);
  int64_t total = 1;
  std::vector<int64_t> out_dims;
  for (char c : order) {
    KILN_CHECK(extent.count(c), ValueError, "equation '{}': output letter '{}' is on no operand", eq, c);
    total *= std::max<int64_t>(extent[c], 1);
    if (out.find(c) != std::string::npos) out_dims.push_back(extent[c]);
  }
  if (total > kMaxEinsumElements) n.unsupported(fmt::format("equation '{}' over {} elements (at most {})", eq, total, kMaxEinsumElements));
  ir::Entry y;
  for (size_t i = 0; i < ops.size(); ++i) {
    // Operand axes in `order`, then length-1 axes for the letters it lacks.
    IntTuple perm;
    std::vector<int64_t> dims;
    const Shape s = n.entry_type(ops[i]).shape;
    for (char c : order) {
      const size_t d = labels[i].find(c);
      if (d != std::string::npos) perm.push_back(static_cast<int64_t>(d));
      dims.push_back(d == std::string::npos ? 1 : s[static_cast<int>(d)]);
    }
    ir::Entry e = ops[i];
    bool identity = true;
    for (size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == static_cast<int64_t>(k);
    if (!identity) e = n.op1(OpId::kTranspose, {e}, TransposeAttrs{.axes = perm});
    e = reshape_to(n, e, dims);
    y = i == 0 ? e : n.op1(OpId::kBroadcastMul, {y, e});
  }
  if (order.size() > out.size()) {
    IntTuple summed;
    for (size_t d = out.size(); d < order.size(); ++d) summed.push_back(static_cast<int64_t>(d));
    y = n.op1(OpId::kSum, {y}, ReduceAttrs{.axis = summed});
  }
  // Broadcast operands may leave a letter at length 1 where the output wants more.
  n.set_output(0, n.entry_type(y).shape == Shape(out_dims)
                      ? y
                      : n.op1(OpId::kBroadcastTo, {reshape_to(n, y, out_dims)}, BroadcastToAttrs{.shape = Shape(out_dims)}));
}

// ReverseSequence: data seen as [batch, time, rest] (time_axis and
// batch_axis are 0 and 1 in either order); row (b, t) comes from time
// len_b - 1 - t when t < len_b, else from t, where len is sequence_lens
// (bound at run time): one take from the [batch * time, rest] table.
void convert_reverse_sequence(NodeContext& n) {
  const Shape& x = n.shape(0);
  KILN_CHECK(x.ndim() >= 2, ShapeError, "expected data of rank 2 or more, got {}", x);
  const int time = normalize_onnx_axis(n, n.attr_int("time_axis", 0), x.ndim());
  const int batch = normalize_onnx_axis(n, n.attr_int("batch_axis", 1), x.ndim());
  KILN_CHECK((time == 0 && batch == 1) || (time == 1 && batch == 0), ValueError,
             "time_axis {} and batch_axis {} must be 0 and 1", time, batch);
  KILN_CHECK(n.shape(1) == Shape{x[batch]}, ShapeError, "sequence_lens {} must be [{}] (axis {} of {})", n.shape(1),
             x[batch], batch, x);
  const int64_t b = x[batch], t = x[time], rest = x.size() / std::max<int64_t>(b * t, 1);
  ir::Entry data = n.input(0);
  const IntTuple swap{1, 0, 2};
  if (time == 0) data = n.op1(OpId::kTranspose, {reshape_to(n, data, {t, b, rest})}, TransposeAttrs{.axes = swap});
  ir::Entry table = reshape_to(n, data, {b * t, rest});
  std::vector<int64_t> steps(static_cast<size_t>(t)), starts(static_cast<size_t>(b));
  std::iota(steps.begin(), steps.end(), 0);
  for (int64_t i = 0; i < b; ++i) starts[static_cast<size_t>(i)] = i * t;
  ir::Entry step = n.constant(nd::array(steps, Shape{1, t}));
  ir::Entry len = reshape_to(n, cast_to(n, n.input(1), DType::kInt64), {b, 1});
  ir::Entry inside = n.op1(OpId::kBroadcastLesser, {step, len});                                   // [b, t]
  ir::Entry reversed = n.op1(OpId::kBroadcastSub, {scalar_op(n, OpId::kMinusScalar, len, 1), step});  // [b, t]
  ir::Entry source = n.op1(OpId::kWhere, {inside, reversed, n.op1(OpId::kBroadcastTo, {step}, BroadcastToAttrs{.shape = Shape{b, t}})});
  source = n.op1(OpId::kBroadcastAdd, {source, n.constant(nd::array(starts, Shape{b, 1}))});
  ir::Entry y = n.op1(OpId::kTake, {table, source}, TakeAttrs{.axis = 0, .mode = TakeMode::kClip});  // [b, t, rest]
  if (time == 0) y = n.op1(OpId::kTranspose, {y}, TransposeAttrs{.axes = swap});
  n.set_output(0, reshape_to(n, y, x.to_vector()));
}

KILN_ONNX_CONVERTER("EyeLike", convert_eye_like);
KILN_ONNX_CONVERTER("InstanceNormalization", convert_instance_norm);
KILN_ONNX_CONVERTER("MeanVarianceNormalization", convert_mvn);
KILN_ONNX_CONVERTER("LRN", convert_lrn);
KILN_ONNX_CONVERTER("CumSum", convert_cumsum);
KILN_ONNX_CONVERTER("TopK", convert_top_k);
KILN_ONNX_CONVERTER("GatherND", convert_gather_nd);
KILN_ONNX_CONVERTER("ScatterND", convert_scatter_nd);
KILN_ONNX_CONVERTER("ScatterElements", convert_scatter_elements);
KILN_ONNX_CONVERTER("Scatter", convert_scatter_elements);
KILN_ONNX_CONVERTER("MaxUnpool", convert_max_unpool);
KILN_ONNX_CONVERTER("HannWindow", convert_window<0>);
KILN_ONNX_CONVERTER("HammingWindow", convert_window<1>);
KILN_ONNX_CONVERTER("BlackmanWindow", convert_window<2>);
KILN_ONNX_CONVERTER("DequantizeLinear", convert_dequantize_linear);
KILN_ONNX_CONVERTER("QuantizeLinear", convert_quantize_linear);
KILN_ONNX_CONVERTER("DynamicQuantizeLinear", convert_dynamic_quantize_linear);
KILN_ONNX_CONVERTER("MatMulInteger", convert_matmul_integer);
KILN_ONNX_CONVERTER("Einsum", convert_einsum);
KILN_ONNX_CONVERTER("ReverseSequence", convert_reverse_sequence);

}  // namespace
}  // namespace kiln::onnx
