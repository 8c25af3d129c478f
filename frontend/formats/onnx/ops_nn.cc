// ONNX converters of the neural-network ops: Conv, BatchNormalization,
// pooling, Gemm, MatMul, activations, Softmax/LogSoftmax, Dropout.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "frontend/formats/onnx/node_context.h"
#include "frontend/nd_init.h"
#include "ir/ops/conv.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/linalg.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"

namespace kiln::onnx {
namespace {

// The pads [begin..., end...] of a window op from pads / auto_pad.
std::vector<int64_t> window_pads(NodeContext& n, const Shape& in, const Shape& kernel, const Shape& stride,
                                 const Shape& dilate) {
  const int nsp = kernel.ndim();
  std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads(static_cast<size_t>(2 * nsp), 0);
  if (auto_pad == "NOTSET") {
    pads = n.attr_ints("pads", pads);
    KILN_CHECK(pads.size() == static_cast<size_t>(2 * nsp), ValueError, "pads [{}] has {} entries, expected {}",
               fmt::join(pads, ","), pads.size(), 2 * nsp);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int i = 0; i < nsp; ++i) {
      int64_t x = in[2 + i], s = stride[i];
      int64_t out = (x + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (out - 1) * s + (kernel[i] - 1) * dilate[i] + 1 - x);
      int64_t small = total / 2, large = total - small;
      pads[static_cast<size_t>(i)] = auto_pad == "SAME_UPPER" ? small : large;
      pads[static_cast<size_t>(i + nsp)] = auto_pad == "SAME_UPPER" ? large : small;
    }
  } else if (auto_pad != "VALID") {
    throw ValueError(fmt::format("auto_pad '{}' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", auto_pad));
  }
  for (int64_t p : pads) KILN_CHECK(p >= 0, ValueError, "negative pads [{}]", fmt::join(pads, ","));
  return pads;
}

bool symmetric(const std::vector<int64_t>& pads) {
  const size_t nsp = pads.size() / 2;
  for (size_t i = 0; i < nsp; ++i)
    if (pads[i] != pads[i + nsp]) return false;
  return true;
}

// Kiln's window ops pad both sides alike: asymmetric pads are written out
// (with `value`, which the window op then sees as data) and the op pads 0.
// Returns the op's symmetric pad.
Shape apply_pads(NodeContext& n, ir::Entry& x, const std::vector<int64_t>& pads, double value) {
  const size_t nsp = pads.size() / 2;
  if (symmetric(pads)) return Shape(std::vector<int64_t>(pads.begin(), pads.begin() + static_cast<long>(nsp)));
  std::vector<int64_t> full(2 * (nsp + 2), 0);
  for (size_t i = 0; i < nsp; ++i) {
    full[2 + i] = pads[i];
    full[nsp + 4 + i] = pads[nsp + i];
  }
  x = pad(n, x, full, "constant", value);
  return Shape(std::vector<int64_t>(nsp, 0));
}

// What max pooling pads with: -inf, or the lowest value of an integer type
// (which has no infinity to convert to).
double max_pool_pad_value(DType dtype) {
  if (is_floating(dtype)) return -std::numeric_limits<double>::infinity();
  return dispatch_dtype(dtype, [](auto tag) -> double {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) return static_cast<double>(std::numeric_limits<T>::lowest());
    else return -std::numeric_limits<double>::infinity();
  });
}

Shape shape_attr(const NodeContext& n, std::string_view name, int nsp, int64_t dflt) {
  std::vector<int64_t> v = n.attr_ints(name, std::vector<int64_t>(static_cast<size_t>(nsp), dflt));
  KILN_CHECK(v.size() == static_cast<size_t>(nsp), ValueError, "{} [{}] has {} entries, expected {}", name,
             fmt::join(v, ","), v.size(), nsp);
  return Shape(v);
}

void convert_conv(NodeContext& n) {
  const Shape& x = n.shape(0);
  const Shape& w = n.shape(1);
  KILN_CHECK(x.ndim() >= 3 && x.ndim() <= 5 && w.ndim() == x.ndim(), ShapeError,
             "expected data [N,C,spatial...] with 1 to 3 spatial axes and a weight of the same rank, got {} and {}", x, w);
  const int nsp = x.ndim() - 2;
  Shape kernel(std::vector<int64_t>(w.begin() + 2, w.end()));
  if (n.has_attr("kernel_shape")) {
    Shape k = shape_attr(n, "kernel_shape", nsp, 1);
    KILN_CHECK(k == kernel, ShapeError, "kernel_shape {} does not match the weight {}", k, w);
  }
  ConvolutionAttrs a{.kernel = kernel,
                     .stride = shape_attr(n, "strides", nsp, 1),
                     .dilate = shape_attr(n, "dilations", nsp, 1),
                     .num_filter = static_cast<int>(w[0]),
                     .num_group = static_cast<int>(n.attr_int("group", 1)),
                     .no_bias = !n.has_input(2)};
  ir::Entry data = n.input(0);
  a.pad = apply_pads(n, data, window_pads(n, x, a.kernel, a.stride, a.dilate), 0.0);
  std::vector<ir::Entry> in{data, n.input(1)};
  if (n.has_input(2)) in.push_back(n.input(2));
  n.set_output(0, n.op(OpId::kConvolution, in, OpAttrs::make(a)).front());
}

// ConvTranspose is the data gradient of the convolution it transposes
// (weight [C_in, C_out/group, k...] is that convolution's weight): computed
// unpadded at full size s (in - 1) + (k - 1) d + 1 + output_padding, then
// cropped by pads (given, or derived from output_shape / auto_pad), then
// the bias added.
void convert_conv_transpose(NodeContext& n) {
  const Shape& x = n.shape(0);
  const Shape& w = n.shape(1);
  KILN_CHECK(x.ndim() >= 3 && x.ndim() <= 5 && w.ndim() == x.ndim(), ShapeError,
             "expected data [N,C,spatial...] with 1 to 3 spatial axes and a weight of the same rank, got {} and {}", x, w);
  const int nsp = x.ndim() - 2;
  const int64_t group = n.attr_int("group", 1);
  Shape kernel(std::vector<int64_t>(w.begin() + 2, w.end()));
  Shape stride = shape_attr(n, "strides", nsp, 1), dilate = shape_attr(n, "dilations", nsp, 1);
  Shape out_pad = shape_attr(n, "output_padding", nsp, 0);
  Shape full{x[0], w[1] * group};
  for (int i = 0; i < nsp; ++i) full.push_back(stride[i] * (x[2 + i] - 1) + (kernel[i] - 1) * dilate[i] + 1 + out_pad[i]);
  std::vector<int64_t> pads(static_cast<size_t>(2 * nsp), 0);
  std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (n.has_attr("output_shape") || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    std::vector<int64_t> want = n.attr_ints("output_shape");
    if (want.empty())
      for (int i = 0; i < nsp; ++i) want.push_back(x[2 + i] * stride[i]);
    if (want.size() == static_cast<size_t>(nsp + 2)) want.erase(want.begin(), want.begin() + 2);
    KILN_CHECK(want.size() == static_cast<size_t>(nsp), ValueError, "output_shape [{}] has {} entries, expected {}",
               fmt::join(want, ","), want.size(), nsp);
    for (int i = 0; i < nsp; ++i) {
      // Negative totals (an output_shape past the full output) pad with zeros; halves round down as ONNX's.
      int64_t total = full[2 + i] - want[static_cast<size_t>(i)];
      int64_t small = total >= 0 ? total / 2 : -((-total + 1) / 2), large = total - small;
      pads[static_cast<size_t>(i)] = auto_pad == "SAME_UPPER" ? small : large;
      pads[static_cast<size_t>(i + nsp)] = auto_pad == "SAME_UPPER" ? large : small;
    }
  } else if (auto_pad == "NOTSET") {
    pads = n.attr_ints("pads", pads);
  }
  KILN_CHECK(pads.size() == static_cast<size_t>(2 * nsp), ValueError, "pads [{}] has {} entries, expected {}",
             fmt::join(pads, ","), pads.size(), 2 * nsp);
  ConvolutionBackwardDataAttrs a;
  a.kernel = kernel;
  a.stride = stride;
  a.dilate = dilate;
  a.num_filter = static_cast<int>(w[0]);
  a.num_group = static_cast<int>(group);
  a.no_bias = true;
  a.data_shape = full;
  ir::Entry y = n.op1(OpId::kConvolutionBackwardData, {n.input(0), n.input(1)}, a);
  std::vector<int64_t> crop(static_cast<size_t>(2 * (nsp + 2)), 0);
  for (int i = 0; i < nsp; ++i) {
    crop[static_cast<size_t>(2 + i)] = -pads[static_cast<size_t>(i)];
    crop[static_cast<size_t>(nsp + 4 + i)] = -pads[static_cast<size_t>(i + nsp)];
  }
  y = pad(n, y, crop, "constant", 0.0);
  if (n.has_input(2)) {
    std::vector<int64_t> bias_shape{1, full[1]};
    bias_shape.resize(static_cast<size_t>(x.ndim()), 1);
    ir::Entry b = n.op1(OpId::kReshape, {n.input(2)}, ReshapeAttrs{.shape = IntTuple(bias_shape)});
    y = n.op1(OpId::kBroadcastAdd, {y, b});
  }
  n.set_output(0, y);
}

// training_mode=1 (opset 14+): normalize with the batch's mean and biased
// variance over every axis but 1, and output the running statistics
// input * momentum + batch * (1 - momentum), composed from Kiln's reductions.
void batch_norm_training(NodeContext& n) {
  const Shape& x = n.shape(0);
  KILN_CHECK(x.ndim() >= 2, ShapeError, "expected data [N,C,...], got {}", x);
  IntTuple axes;
  for (int d = 0; d < x.ndim(); ++d) {
    if (d != 1) axes.push_back(d);
  }
  const double eps = n.attr_float("epsilon", 1e-5), momentum = n.attr_float("momentum", 0.9);
  Normalized r = normalize_channels(n, n.input(0), axes, eps, n.input(1), n.input(2));
  n.set_output(0, r.y);
  auto running = [&](size_t input, ir::Entry batch) {
    ir::Entry old = scalar_op(n, OpId::kMulScalar, n.input(input), momentum);
    ir::Entry now = scalar_op(n, OpId::kMulScalar, reshape_to(n, batch, {x[1]}), 1 - momentum);
    return n.op1(OpId::kBroadcastAdd, {old, now});
  };
  if (n.has_output(1)) n.set_output(1, running(3, r.mean));
  if (n.has_output(2)) n.set_output(2, running(4, r.var));
}

void convert_batch_norm(NodeContext& n) {
  if (n.opset() >= 14 && n.attr_int("training_mode", 0) != 0) return batch_norm_training(n);
  if (n.num_outputs() > 1 && n.has_output(1)) n.unsupported("training-mode outputs (running mean and variance)");
  if (n.opset() < 9) n.require_attr_int("spatial", 1, "per-activation statistics");
  BatchNormAttrs a{.eps = n.attr_float("epsilon", 1e-5),
                   .momentum = static_cast<float>(n.attr_float("momentum", 0.9)),
                   .fix_gamma = false,
                   .use_global_stats = true};
  std::vector<ir::Entry> in;
  for (size_t i = 0; i < 5; ++i) in.push_back(n.input(i));
  n.set_output(0, n.op(OpId::kBatchNorm, in, OpAttrs::make(a)).front());
}

// MaxPool's Indices output: the flat index of each window's first maximum in
// the input (row-major over N, C and the spatial axes; storage_order 1 counts
// the spatial axes column-major). Composed exactly: each window tap is a
// strided slice of the padded input, the taps are stacked on a last axis,
// argmax picks the first maximum, and constant tables turn (output position,
// tap) into the input's index. Taps in the padding hold the lowest value, so
// they never win unless the whole window equals it.
// One slice per window tap: a bound on the graph a file can make.
constexpr int64_t kMaxIndexTaps = 1024;

ir::Entry max_pool_indices(NodeContext& n, ir::Entry x, const PoolingAttrs& a, const std::vector<int64_t>& pads) {
  const Shape& in = n.entry_type(x).shape;
  const int nsp = in.ndim() - 2, rank = in.ndim();
  const bool col_major = n.attr_int("storage_order", 0) != 0;
  std::vector<int64_t> out(static_cast<size_t>(nsp)), span(out.size()), full(static_cast<size_t>(2 * rank), 0);
  for (int i = 0; i < nsp; ++i) {
    const size_t u = static_cast<size_t>(i);
    const int64_t d = a.dilate.ndim() ? a.dilate[i] : 1;
    span[u] = (a.kernel[i] - 1) * d + 1;
    const int64_t steps = in[2 + i] + pads[u] + pads[u + static_cast<size_t>(nsp)] - span[u];
    KILN_CHECK(steps >= 0, ShapeError, "kernel {} spans more than the padded input {}", a.kernel, in);
    out[u] = 1 + (a.pooling_convention == "full" ? (steps + a.stride[i] - 1) / a.stride[i] : steps / a.stride[i]);
    full[static_cast<size_t>(2 + i)] = pads[u];
    full[static_cast<size_t>(rank + 2 + i)] =
        std::max<int64_t>(pads[u + static_cast<size_t>(nsp)], (out[u] - 1) * a.stride[i] + span[u] - in[2 + i] - pads[u]);
  }
  ir::Entry padded = pad(n, x, full, "constant", max_pool_pad_value(n.entry_type(x).dtype));
  // Spatial strides of the index: row-major, or column-major for storage_order 1.
  std::vector<int64_t> step(static_cast<size_t>(nsp), 1);
  if (col_major) {
    for (int i = 1; i < nsp; ++i) step[static_cast<size_t>(i)] = step[static_cast<size_t>(i - 1)] * in[1 + i];
  } else {
    for (int i = nsp - 2; i >= 0; --i) step[static_cast<size_t>(i)] = step[static_cast<size_t>(i + 1)] * in[3 + i];
  }
  int64_t taps = 1, positions = 1;
  for (int i = 0; i < nsp; ++i) {
    taps *= a.kernel[i];
    positions *= out[static_cast<size_t>(i)];
    KILN_CHECK(taps <= kMaxIndexTaps && positions <= kMaxImportElements && in[0] <= kMaxImportElements / std::max<int64_t>(in[1], 1),
               NotSupported, "the Indices output of a {} window over {} (at most {} taps and {} positions)", a.kernel,
               in, kMaxIndexTaps, kMaxImportElements);
  }
  std::vector<ir::Entry> tap_values;
  std::vector<int64_t> tap_offset;
  for (int64_t t = 0; t < taps; ++t) {
    std::vector<std::optional<int64_t>> b(static_cast<size_t>(rank)), e(b.size()), st(b.size());
    int64_t rest = t, offset = 0;
    for (int i = nsp - 1; i >= 0; --i) {
      const size_t u = static_cast<size_t>(i);
      const int64_t k = rest % a.kernel[i], d = a.dilate.ndim() ? a.dilate[i] : 1;
      rest /= a.kernel[i];
      b[u + 2] = k * d;
      e[u + 2] = k * d + (out[u] - 1) * a.stride[i] + 1;
      st[u + 2] = a.stride[i];
      offset += k * d * step[u];
    }
    ir::Entry v = n.op1(OpId::kSlice, {padded}, SliceAttrs{.begin = OptIntTuple(b), .end = OptIntTuple(e), .step = OptIntTuple(st)});
    tap_values.push_back(v);
    tap_offset.push_back(offset);
  }
  ir::Entry stacked = n.op(OpId::kStack, tap_values, OpAttrs::make(StackAttrs{.axis = rank, .num_args = static_cast<int>(taps)})).front();
  ir::Entry tap = n.op1(OpId::kArgmax, {stacked}, ArgReduceAttrs{.axis = rank});
  tap = n.op1(OpId::kCast, {tap}, CastAttrs{.dtype = DType::kInt64});
  ir::Entry index = n.op1(OpId::kTake, {n.constant(nd::array(tap_offset, Shape{taps})), tap}, TakeAttrs{});
  // The index of each window's first tap (position in the padded input minus the padding).
  std::vector<int64_t> base(static_cast<size_t>(positions)), base_shape{1, 1};
  for (int i = 0; i < nsp; ++i) base_shape.push_back(out[static_cast<size_t>(i)]);
  for (int64_t q = 0; q < positions; ++q) {
    int64_t rest = q, at = 0;
    for (int i = nsp - 1; i >= 0; --i) {
      const size_t u = static_cast<size_t>(i);
      at += ((rest % out[u]) * a.stride[i] - pads[u]) * step[u];
      rest /= out[u];
    }
    base[static_cast<size_t>(q)] = at;
  }
  index = n.op1(OpId::kBroadcastAdd, {index, n.constant(nd::array(base, Shape(base_shape)))});
  int64_t plane = 1;
  for (int i = 0; i < nsp; ++i) plane *= in[2 + i];
  std::vector<int64_t> planes(static_cast<size_t>(in[0] * in[1])), planes_shape{in[0], in[1]};
  for (size_t q = 0; q < planes.size(); ++q) planes[q] = static_cast<int64_t>(q) * plane;
  planes_shape.resize(static_cast<size_t>(rank), 1);
  return n.op1(OpId::kBroadcastAdd, {index, n.constant(nd::array(planes, Shape(planes_shape)))});
}

void convert_pool(NodeContext& n, std::string pool_type) {
  const Shape& x = n.shape(0);
  KILN_CHECK(x.ndim() >= 3 && x.ndim() <= 5, ShapeError, "expected data [N,C,spatial...] with 1 to 3 spatial axes, got {}", x);
  const int nsp = x.ndim() - 2;
  Shape dilate = shape_attr(n, "dilations", nsp, 1);
  PoolingAttrs a{.kernel = shape_attr(n, "kernel_shape", nsp, 1),
                 .pool_type = std::move(pool_type),
                 .pooling_convention = n.attr_int("ceil_mode", 0) ? "full" : "valid",
                 .stride = shape_attr(n, "strides", nsp, 1)};
  for (int64_t d : dilate) {
    if (d != 1) a.dilate = dilate;  // MaxPool's (AveragePool has none before opset 19)
  }
  std::vector<int64_t> pads = window_pads(n, x, a.kernel, a.stride, dilate);
  ir::Entry data = n.input(0);
  if (a.pool_type == "avg") {
    a.count_include_pad = n.attr_int("count_include_pad", 0) != 0;
    if (!symmetric(pads) && !*a.count_include_pad) {
      // Averages over the input elements only: sum pooling of the zero-padded
      // data divided by sum pooling of the zero-padded ones.
      a.pool_type = "sum";
      a.count_include_pad.reset();
      a.pad = apply_pads(n, data, pads, 0.0);
      std::vector<int64_t> plane{1, 1};
      for (int i = 2; i < x.ndim(); ++i) plane.push_back(x[i]);
      ir::Entry ones = n.constant(nd::ones(Shape(plane)));
      apply_pads(n, ones, pads, 0.0);
      ir::Entry sum = n.op1(OpId::kPooling, {data}, a);
      n.set_output(0, n.op1(OpId::kBroadcastDiv, {sum, n.op1(OpId::kPooling, {ones}, a)}));
      return;
    }
  }
  // Integer data (uint8, int8) pools exactly through float32, which holds
  // every 8-bit value; Kiln's Pooling takes floating types only.
  const DType dtype = n.type(0).dtype;
  const bool widen = !is_floating(dtype) && a.pool_type == "max";
  if (widen) {
    KILN_CHECK(dtype == DType::kUint8 || dtype == DType::kInt8, NotSupported,
               "MaxPool of {} (8-bit integers pool exactly through float32; wider ones would not)", dtype);
    data = n.op1(OpId::kCast, {data}, CastAttrs{.dtype = DType::kFloat32});
  }
  if (n.has_output(1)) {
    KILN_CHECK(a.pool_type == "max", ValueError, "only MaxPool has an Indices output");
    n.set_output(1, max_pool_indices(n, data, a, pads));
  }
  a.pad = apply_pads(n, data, pads, a.pool_type == "max" ? max_pool_pad_value(n.entry_type(data).dtype) : 0.0);
  ir::Entry y = n.op1(OpId::kPooling, {data}, a);
  if (widen) y = n.op1(OpId::kCast, {y}, CastAttrs{.dtype = dtype});
  n.set_output(0, y);
}

void convert_max_pool(NodeContext& n) { convert_pool(n, "max"); }
void convert_average_pool(NodeContext& n) { convert_pool(n, "avg"); }

void convert_global_pool(NodeContext& n, const char* pool_type) {
  KILN_CHECK(n.shape(0).ndim() >= 3, ShapeError, "expected data [N,C,spatial...], got {}", n.shape(0));
  n.set_output(0, n.op1(OpId::kPooling, {n.input(0)}, PoolingAttrs{.pool_type = pool_type, .global_pool = true}));
}
void convert_global_average_pool(NodeContext& n) { convert_global_pool(n, "avg"); }
void convert_global_max_pool(NodeContext& n) { convert_global_pool(n, "max"); }

ir::Entry scaled(NodeContext& n, ir::Entry e, double s) {
  return s == 1.0 ? e : n.op1(OpId::kMulScalar, {e}, ScalarAttrs{.scalar = s});
}

void convert_gemm(NodeContext& n) {
  double alpha = n.attr_float("alpha", 1.0), beta = n.attr_float("beta", 1.0);
  bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  KILN_CHECK(n.shape(0).ndim() == 2 && n.shape(1).ndim() == 2, ShapeError, "expected matrices A and B, got {} and {}",
             n.shape(0), n.shape(1));
  const int64_t cols = tb ? n.shape(1)[0] : n.shape(1)[1];
  bool fc_bias = !n.has_input(2) || (n.shape(2).ndim() == 1 && n.shape(2)[0] == cols);
  if (alpha == 1.0 && (beta == 1.0 || !n.has_input(2)) && !ta && tb && fc_bias) {
    // A Linear layer: FullyConnected, which the passes fuse and plan like Kiln's own Dense.
    FullyConnectedAttrs a{.num_hidden = static_cast<int>(cols), .no_bias = !n.has_input(2), .flatten = false};
    std::vector<ir::Entry> in{n.input(0), n.input(1)};
    if (n.has_input(2)) in.push_back(n.input(2));
    n.set_output(0, n.op(OpId::kFullyConnected, in, OpAttrs::make(a)).front());
    return;
  }
  ir::Entry y = scaled(n, n.op1(OpId::kDot, {n.input(0), n.input(1)}, DotAttrs{.transpose_a = ta, .transpose_b = tb}), alpha);
  if (n.has_input(2) && beta != 0.0) y = n.op1(OpId::kBroadcastAdd, {y, scaled(n, n.input(2), beta)});
  n.set_output(0, y);
}

// NumPy matmul: 1-D operands gain (then lose) an axis, batch dims broadcast.
void convert_matmul(NodeContext& n) {
  Shape a = n.shape(0), b = n.shape(1);
  KILN_CHECK(a.ndim() >= 1 && b.ndim() >= 1, ShapeError, "MatMul of a scalar: {} and {}", a, b);
  ir::Entry ea = n.input(0), eb = n.input(1);
  if (b.ndim() <= 2 && a.ndim() >= 1) {
    // [..., k] x [k] or [..., m, k] x [k, n]: one dot over the flattened leading dims.
    ir::Entry y = n.op1(OpId::kDot, {ea, eb}, DotAttrs{});
    n.set_output(0, y);
    return;
  }
  std::vector<int64_t> av = a.to_vector(), bv = b.to_vector();
  bool a_vec = av.size() == 1;
  if (a_vec) av.insert(av.begin(), 1);
  std::vector<int64_t> a_batch(av.begin(), av.end() - 2), b_batch(bv.begin(), bv.end() - 2);
  Shape batch = broadcast_shapes(Shape(a_batch), Shape(b_batch), "MatMul batch dims");
  int64_t nb = batch.size(), m = av[av.size() - 2], k = av.back(), k2 = bv[bv.size() - 2], cols = bv.back();
  KILN_CHECK(k == k2, ShapeError, "MatMul: {} and {} do not agree on k", a, b);
  auto batched = [&](ir::Entry e, std::vector<int64_t> dims, int64_t r, int64_t c) {
    std::vector<int64_t> full = batch.to_vector();
    full.push_back(r);
    full.push_back(c);
    e = reshape_to(n, e, dims);
    if (Shape(dims) != Shape(full)) e = n.op1(OpId::kBroadcastTo, {e}, BroadcastToAttrs{.shape = Shape(full)});
    return reshape_to(n, e, {nb, r, c});
  };
  ir::Entry y = n.op1(OpId::kBatchDot, {batched(ea, av, m, k), batched(eb, bv, k, cols)}, DotAttrs{});
  std::vector<int64_t> out = batch.to_vector();
  if (!a_vec) out.push_back(m);
  out.push_back(cols);
  n.set_output(0, reshape_to(n, y, out));
}

void convert_relu(NodeContext& n) { n.set_output(0, n.op1(OpId::kRelu, {n.input(0)})); }
void convert_sigmoid(NodeContext& n) { n.set_output(0, n.op1(OpId::kSigmoid, {n.input(0)})); }
void convert_tanh(NodeContext& n) { n.set_output(0, n.op1(OpId::kTanh, {n.input(0)})); }

void convert_leaky_relu(NodeContext& n) {
  n.set_output(0, n.op1(OpId::kLeakyReLU, {n.input(0)},
                        LeakyReLUAttrs{.act_type = LeakyType::kLeaky, .slope = n.attr_float("alpha", 0.01)}));
}

void convert_elu(NodeContext& n) {
  n.set_output(0, n.op1(OpId::kLeakyReLU, {n.input(0)},
                        LeakyReLUAttrs{.act_type = LeakyType::kElu, .slope = n.attr_float("alpha", 1.0)}));
}

// Celu: x for x > 0, alpha (exp(x / alpha) - 1) otherwise, which is
// alpha * elu(x / alpha) on that side; the positive side is x itself.
void convert_celu(NodeContext& n) {
  const double alpha = n.attr_float("alpha", 1.0);
  ir::Entry x = n.input(0);
  ir::Entry scaled = n.op1(OpId::kDivScalar, {x}, ScalarAttrs{.scalar = alpha});
  ir::Entry elu = n.op1(OpId::kLeakyReLU, {scaled}, LeakyReLUAttrs{.act_type = LeakyType::kElu, .slope = 1.0});
  ir::Entry negative_side = n.op1(OpId::kMulScalar, {elu}, ScalarAttrs{.scalar = alpha});
  ir::Entry positive = n.op1(OpId::kGreaterScalar, {x}, ScalarAttrs{.scalar = 0});
  n.set_output(0, n.op1(OpId::kWhere, {positive, x, negative_side}));
}

// A zero of x's dtype of shape () that `where` broadcasts (x * 0 would be NaN at infinities).
ir::Entry zero_like(NodeContext& n, size_t i) { return n.constant(nd::zeros(Shape{}, {.dtype = n.type(i).dtype})); }

// ThresholdedRelu: x where x > alpha, else 0.
void convert_thresholded_relu(NodeContext& n) {
  n.set_output(0, thresholded_relu(n, n.input(0), n.attr_float("alpha", 1.0)));
}

// Shrink: x + bias below -lambd, x - bias above lambd, 0 between.
void convert_shrink(NodeContext& n) {
  const double lambd = n.attr_float("lambd", 0.5), bias = n.attr_float("bias", 0.0);
  ir::Entry x = n.input(0);
  ir::Entry below = n.op1(OpId::kLesserScalar, {x}, ScalarAttrs{.scalar = -lambd});
  ir::Entry above = n.op1(OpId::kGreaterScalar, {x}, ScalarAttrs{.scalar = lambd});
  ir::Entry y =
      n.op1(OpId::kWhere, {above, n.op1(OpId::kMinusScalar, {x}, ScalarAttrs{.scalar = bias}), zero_like(n, 0)});
  n.set_output(0, n.op1(OpId::kWhere, {below, n.op1(OpId::kPlusScalar, {x}, ScalarAttrs{.scalar = bias}), y}));
}

// PRelu: Kiln's per-channel prelu when the slope is one per channel (or one
// in all), else max(0, x) + slope * min(0, x), exact either way.
void convert_prelu(NodeContext& n) {
  const Shape& x = n.shape(0);
  const Shape& s = n.shape(1);
  int64_t channels = x.ndim() >= 2 ? x[1] : 1;
  bool per_channel = s.size() == 1;
  if (!per_channel && x.ndim() >= 2 && s.size() == channels && s.ndim() <= x.ndim() - 1) {
    per_channel = s[0] == channels || (s.ndim() == x.ndim() && s[1] == channels);  // [C,1..] or [1,C,1..]
  }
  if (per_channel) {
    ir::Entry gamma = n.op1(OpId::kReshape, {n.input(1)}, ReshapeAttrs{.shape = IntTuple{s.size()}});
    n.set_output(0, n.op1(OpId::kLeakyReLU, {n.input(0), gamma}, LeakyReLUAttrs{.act_type = LeakyType::kPrelu}));
    return;
  }
  ir::Entry in = n.input(0);
  ir::Entry neg = n.op1(OpId::kNegative, {n.op1(OpId::kRelu, {n.op1(OpId::kNegative, {in})})});
  n.set_output(0, n.op1(OpId::kBroadcastAdd, {n.op1(OpId::kRelu, {in}), n.op1(OpId::kBroadcastMul, {n.input(1), neg})}));
}

void convert_softplus(NodeContext& n) {
  n.set_output(0, n.op1(OpId::kActivation, {n.input(0)}, ActivationAttrs{.act_type = ActType::kSoftrelu}));
}
void convert_softsign(NodeContext& n) {
  n.set_output(0, n.op1(OpId::kActivation, {n.input(0)}, ActivationAttrs{.act_type = ActType::kSoftsign}));
}

// Selu: Kiln's selu with ONNX's default alpha and gamma; other values as
// gamma * elu(x, alpha), which is the same function.
void convert_selu(NodeContext& n) {
  double alpha = n.attr_float("alpha", kSeluAlpha), gamma = n.attr_float("gamma", kSeluLambda);
  if (std::abs(alpha - kSeluAlpha) <= 1e-6 && std::abs(gamma - kSeluLambda) <= 1e-6) {  // float attributes
    n.set_output(0, n.op1(OpId::kLeakyReLU, {n.input(0)}, LeakyReLUAttrs{.act_type = LeakyType::kSelu}));
    return;
  }
  ir::Entry elu = n.op1(OpId::kLeakyReLU, {n.input(0)}, LeakyReLUAttrs{.act_type = LeakyType::kElu, .slope = alpha});
  n.set_output(0, n.op1(OpId::kMulScalar, {elu}, ScalarAttrs{.scalar = gamma}));
}

// Gelu (exact, with erf): what frontend/formats/onnx/patterns.cc makes of
// the Div-Erf-Add-Mul-Mul that exporters write before opset 20.
void convert_gelu(NodeContext& n) {
  if (n.attr_string("approximate", "none") != "none") n.unsupported("approximate GELU");
  n.set_output(0, n.op1(OpId::kLeakyReLU, {n.input(0)}, LeakyReLUAttrs{.act_type = LeakyType::kGelu}));
}

// HardSigmoid: max(0, min(1, alpha x + beta)).
void convert_hard_sigmoid(NodeContext& n) {
  n.set_output(0, hard_sigmoid(n, n.input(0), n.attr_float("alpha", 0.2), n.attr_float("beta", 0.5)));
}

void convert_hard_swish(NodeContext& n) {
  ir::Entry x = n.input(0);
  n.set_output(0, n.op1(OpId::kBroadcastMul, {x, hard_sigmoid(n, x, 1.0 / 6.0, 0.5)}));
}

// Softmax/LogSoftmax: from opset 13 along one axis (default -1); before,
// over the input coerced to 2-D at `axis` (default 1).
void convert_softmax_like(NodeContext& n, OpId id) {
  const Shape& x = n.shape(0);
  if (n.opset() >= 13) {
    int axis = normalize_onnx_axis(n, n.attr_int("axis", -1), x.ndim());
    n.set_output(0, n.op1(id, {n.input(0)}, SoftmaxAttrs{.axis = axis}));
    return;
  }
  int axis = normalize_onnx_axis(n, n.attr_int("axis", 1), x.ndim());
  int64_t rows = 1, cols = 1;
  for (int d = 0; d < x.ndim(); ++d) (d < axis ? rows : cols) *= x[d];
  ir::Entry y = reshape_to(n, n.input(0), {rows, cols});
  y = n.op1(id, {y}, SoftmaxAttrs{.axis = -1});
  n.set_output(0, reshape_to(n, y, x.to_vector()));
}
void convert_softmax(NodeContext& n) { convert_softmax_like(n, OpId::kSoftmax); }
void convert_log_softmax(NodeContext& n) { convert_softmax_like(n, OpId::kLogSoftmax); }

// LayerNormalization (opset 17) over the axes from `axis` on, in Kiln ops:
// d = x - mean(x); y = d / sqrt(mean(d^2) + epsilon) * scale + bias. The
// decomposition older exporters write (ReduceMean, Sub, Pow, Sqrt, Div, ...)
// imports op by op.
void convert_layer_norm(NodeContext& n) {
  const Shape& x = n.shape(0);
  int axis = normalize_onnx_axis(n, n.attr_int("axis", -1), x.ndim());
  IntTuple axes;
  for (int d = axis; d < x.ndim(); ++d) axes.push_back(d);
  ReduceAttrs mean_attrs{.axis = axes, .keepdims = true};
  ir::Entry in = n.input(0);
  ir::Entry mean = n.op1(OpId::kMean, {in}, mean_attrs);
  ir::Entry d = n.op1(OpId::kBroadcastSub, {in, mean});
  ir::Entry var = n.op1(OpId::kMean, {n.op1(OpId::kSquare, {d})}, mean_attrs);
  ir::Entry std = n.op1(OpId::kSqrt, {n.op1(OpId::kPlusScalar, {var}, ScalarAttrs{.scalar = n.attr_float("epsilon", 1e-5)})});
  ir::Entry y = n.op1(OpId::kBroadcastMul, {n.op1(OpId::kBroadcastDiv, {d, std}), n.input(1)});
  if (n.has_input(2)) y = n.op1(OpId::kBroadcastAdd, {y, n.input(2)});
  n.set_output(0, y);
  n.set_output(1, mean);
  if (n.has_output(2)) n.set_output(2, n.op1(OpId::kRDivScalar, {std}, ScalarAttrs{.scalar = 1.0}));
}

// Dropout at inference is the identity (its mask, when asked for, all true).
// training_mode true (opset 12+; ratio and training_mode known at import):
// ratio 0 is the identity too; otherwise Kiln's Dropout in mode "always",
// which draws a fresh mask at each call from Kiln's counter-based stream
// (the `seed` attribute is not honoured: no generator reproduces ONNX
// runtimes' masks), scales kept elements by 1 / (1 - ratio), and gives the
// mask as the scale or 0, which becomes ONNX's boolean mask.
void convert_dropout(NodeContext& n) {
  const bool training =
      n.opset() >= 12 && n.has_input(2) && n.known_ints(2, "training_mode") != std::vector<int64_t>{0};
  if (n.opset() < 7) n.require_attr_int("is_test", 1, "training mode");
  double ratio = 0.5;
  if (n.opset() >= 12 && n.has_input(1)) {
    std::vector<double> r = n.known_doubles(1, "ratio");
    KILN_CHECK(r.size() == 1, ShapeError, "ratio must be a scalar, got {} values", r.size());
    ratio = r[0];
  } else if (n.opset() < 12) {
    ratio = n.attr_float("ratio", 0.5);
  }
  KILN_CHECK(ratio >= 0 && ratio < 1, ValueError, "ratio must be in [0, 1), got {}", ratio);
  if (!training || ratio == 0) {
    n.set_output(0, n.input(0));
    if (n.has_output(1)) {
      NDArray mask = NDArray::empty(n.shape(0), {DType::kBool, Device::cpu(0)});
      std::fill_n(static_cast<bool*>(mask.data()), mask.size(), true);
      n.set_known(1, mask);
    }
    return;
  }
  std::vector<ir::Entry> out =
      n.op(OpId::kDropout, std::vector<ir::Entry>{n.input(0)}, OpAttrs::make(DropoutAttrs{.p = ratio, .mode = DropoutMode::kAlways}));
  n.set_output(0, out[0]);
  if (n.has_output(1)) {
    ir::Entry kept = n.op1(OpId::kNotEqualScalar, {out[1]}, ScalarAttrs{.scalar = 0.0});
    n.set_output(1, n.op1(OpId::kCast, {kept}, CastAttrs{.dtype = DType::kBool}));
  }
}

KILN_ONNX_CONVERTER("Conv", convert_conv);
KILN_ONNX_CONVERTER("ConvTranspose", convert_conv_transpose);
KILN_ONNX_CONVERTER("BatchNormalization", convert_batch_norm);
KILN_ONNX_CONVERTER("MaxPool", convert_max_pool);
KILN_ONNX_CONVERTER("AveragePool", convert_average_pool);
KILN_ONNX_CONVERTER("GlobalAveragePool", convert_global_average_pool);
KILN_ONNX_CONVERTER("GlobalMaxPool", convert_global_max_pool);
KILN_ONNX_CONVERTER("Gemm", convert_gemm);
KILN_ONNX_CONVERTER("MatMul", convert_matmul);
KILN_ONNX_CONVERTER("Relu", convert_relu);
KILN_ONNX_CONVERTER("Sigmoid", convert_sigmoid);
KILN_ONNX_CONVERTER("Tanh", convert_tanh);
KILN_ONNX_CONVERTER("LeakyRelu", convert_leaky_relu);
KILN_ONNX_CONVERTER("PRelu", convert_prelu);
KILN_ONNX_CONVERTER("Gelu", convert_gelu);
KILN_ONNX_CONVERTER("Softplus", convert_softplus);
KILN_ONNX_CONVERTER("Softsign", convert_softsign);
KILN_ONNX_CONVERTER("Selu", convert_selu);
KILN_ONNX_CONVERTER("Elu", convert_elu);
KILN_ONNX_CONVERTER("Celu", convert_celu);
KILN_ONNX_CONVERTER("ThresholdedRelu", convert_thresholded_relu);
KILN_ONNX_CONVERTER("Shrink", convert_shrink);
KILN_ONNX_CONVERTER("HardSigmoid", convert_hard_sigmoid);
KILN_ONNX_CONVERTER("HardSwish", convert_hard_swish);
KILN_ONNX_CONVERTER("Softmax", convert_softmax);
KILN_ONNX_CONVERTER("LogSoftmax", convert_log_softmax);
KILN_ONNX_CONVERTER("Dropout", convert_dropout);
KILN_ONNX_CONVERTER("LayerNormalization", convert_layer_norm);

}  // namespace

ir::Entry hard_sigmoid(NodeContext& n, ir::Entry x, double alpha, double beta) {
  ir::Entry y = scalar_op(n, OpId::kPlusScalar, scalar_op(n, OpId::kMulScalar, x, alpha), beta);
  return n.op1(OpId::kClip, {y}, ClipAttrs{.a_min = 0, .a_max = 1});
}

ir::Entry thresholded_relu(NodeContext& n, ir::Entry x, double alpha) {
  ir::Entry above = scalar_op(n, OpId::kGreaterScalar, x, alpha);
  return n.op1(OpId::kWhere, {above, x, n.constant(nd::zeros(Shape{}, {.dtype = n.entry_type(x).dtype}))});
}

Normalized normalize_channels(NodeContext& n, ir::Entry x, const IntTuple& axes, double eps, ir::Entry scale,
                              ir::Entry bias) {
  const Shape s = n.entry_type(x).shape;
  std::vector<int64_t> channel_shape(static_cast<size_t>(s.ndim()), 1);
  channel_shape[1] = s[1];
  const ReduceAttrs over{.axis = axes, .keepdims = true};
  ir::Entry mean = n.op1(OpId::kMean, {x}, over);
  ir::Entry centered = n.op1(OpId::kBroadcastSub, {x, mean});
  ir::Entry var = n.op1(OpId::kMean, {n.op1(OpId::kSquare, {centered})}, over);
  ir::Entry std = n.op1(OpId::kSqrt, {scalar_op(n, OpId::kPlusScalar, var, eps)});
  ir::Entry y = n.op1(OpId::kBroadcastDiv, {centered, std});
  y = n.op1(OpId::kBroadcastMul, {y, reshape_to(n, scale, channel_shape)});
  return {n.op1(OpId::kBroadcastAdd, {y, reshape_to(n, bias, channel_shape)}), mean, var};
}

}  // namespace kiln::onnx
