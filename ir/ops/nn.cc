// OpDefs of the nn family (attributes and semantics: ir/ops/nn.h; CPU kernels:
// backends/cpu/nn_*.cc). Each op's gradient sits next to its inference.
#include "ir/ops/nn.h"

#include "ir/grad.h"
#include "ir/grad_ops.h"
#include "ir/op.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/linalg.h"
#include "ir/ops/matrix.h"
#include "ir/ops/reduce.h"

namespace kiln {

// ---- enum codecs

ActType parse_attr(std::string_view s, ActType*) {
  std::string m = parse_attr(s, static_cast<std::string*>(nullptr));
  if (m == "relu") return ActType::kRelu;
  if (m == "sigmoid") return ActType::kSigmoid;
  if (m == "tanh") return ActType::kTanh;
  if (m == "softrelu") return ActType::kSoftrelu;
  if (m == "softsign") return ActType::kSoftsign;
  throw ValueError(fmt::format("expected 'relu', 'sigmoid', 'tanh', 'softrelu' or 'softsign', found '{}'", m));
}

std::string print_attr(ActType v) {
  switch (v) {
    case ActType::kRelu:
      return "relu";
    case ActType::kSigmoid:
      return "sigmoid";
    case ActType::kTanh:
      return "tanh";
    case ActType::kSoftrelu:
      return "softrelu";
    case ActType::kSoftsign:
      return "softsign";
  }
  return "relu";
}

LeakyType parse_attr(std::string_view s, LeakyType*) {
  std::string m = parse_attr(s, static_cast<std::string*>(nullptr));
  if (m == "leaky") return LeakyType::kLeaky;
  if (m == "elu") return LeakyType::kElu;
  if (m == "selu") return LeakyType::kSelu;
  if (m == "gelu" || m == "gelu_erf") return LeakyType::kGelu;  // MXNet 2 calls the erf form gelu_erf
  if (m == "prelu") return LeakyType::kPrelu;
  if (m == "rrelu") return LeakyType::kRrelu;
  if (m == "gelu_tanh") return LeakyType::kGeluTanh;
  throw ValueError(
      fmt::format("expected 'leaky', 'elu', 'selu', 'gelu', 'gelu_tanh', 'prelu' or 'rrelu', found '{}'", m));
}

std::string print_attr(LeakyType v) {
  switch (v) {
    case LeakyType::kLeaky:
      return "leaky";
    case LeakyType::kElu:
      return "elu";
    case LeakyType::kSelu:
      return "selu";
    case LeakyType::kGelu:
      return "gelu";
    case LeakyType::kPrelu:
      return "prelu";
    case LeakyType::kRrelu:
      return "rrelu";
    case LeakyType::kGeluTanh:
      return "gelu_tanh";
  }
  return "leaky";
}

DropoutMode parse_attr(std::string_view s, DropoutMode*) {
  std::string m = parse_attr(s, static_cast<std::string*>(nullptr));
  if (m == "training") return DropoutMode::kTraining;
  if (m == "always") return DropoutMode::kAlways;
  throw ValueError(fmt::format("expected 'training' or 'always', found '{}'", m));
}

std::string print_attr(DropoutMode v) { return v == DropoutMode::kAlways ? "always" : "training"; }

// ---- shape rules

FullyConnectedDims fully_connected_dims(const Shape& data, const Shape& weight, const FullyConnectedAttrs& attrs) {
  KILN_CHECK(data.ndim() >= 1, ShapeError, "data must have at least one axis, got a scalar");
  KILN_CHECK(weight.ndim() == 2, ShapeError, "weight must be [num_hidden, input size], got {}", weight);
  FullyConnectedDims d;
  if (attrs.flatten) {
    d.m = data[0];
    d.k = 1;
    for (int i = 1; i < data.ndim(); ++i) d.k *= data[i];
    d.out = Shape{d.m, attrs.num_hidden};
  } else {
    d.k = data[data.ndim() - 1];
    d.m = 1;
    for (int i = 0; i + 1 < data.ndim(); ++i) {
      d.m *= data[i];
      d.out.push_back(data[i]);
    }
    d.out.push_back(attrs.num_hidden);
  }
  d.n = attrs.num_hidden;
  KILN_CHECK(weight[0] == attrs.num_hidden && weight[1] == d.k, ShapeError,
             "data {} gives input size {} (flatten={}) but weight is {}; expected [{}, {}]", data, d.k,
             print_attr(attrs.flatten), weight, attrs.num_hidden, d.k);
  return d;
}

AxisSplit split_at_axis(const Shape& s, int axis) {
  AxisSplit a;
  for (int i = 0; i < axis; ++i) a.outer *= s[i];
  a.n = s[axis];
  for (int i = axis + 1; i < s.ndim(); ++i) a.inner *= s[i];
  return a;
}

Shape pick_out_shape(const Shape& data, int axis, bool keepdims) {
  Shape out;
  for (int i = 0; i < data.ndim(); ++i) {
    if (i != axis)
      out.push_back(data[i]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

namespace {

// ---- small helpers for gradients

using grad_ops::reshape_to;

GradValue dot(GradBuilder& b, GradValue x, GradValue y, bool ta, bool tb) {
  return b.op(OpId::kDot, {x, y}, OpAttrs::make(DotAttrs{.transpose_a = ta, .transpose_b = tb}));
}

void check_float(DType t, const char* what) {
  KILN_CHECK(is_floating(t), TypeError, "{} must be float32, float64, float16 or bfloat16, got {}", what, t);
}

void check_same(const TensorType& a, const TensorType& b, const char* what) {
  KILN_CHECK(a == b, ShapeError, "{} must have the same shape and dtype, got {}{} and {}{}", what,
             dtype_short_name(a.dtype), a.shape, dtype_short_name(b.dtype), b.shape);
}

bool is_index_dtype(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBfloat16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUint8:
    case DType::kInt8:
      return true;
    default:
      return false;
  }
}

void check_index_dtype(DType t, const char* what) {
  KILN_CHECK(is_index_dtype(t), TypeError, "{} must be float32, float64, float16, bfloat16, int32, int64, uint8 or int8, got {}", what, t);
}

// ---- FullyConnected

void infer_fully_connected(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<FullyConnectedAttrs>();
  size_t want = a.no_bias ? 2 : 3;
  KILN_CHECK(in.size() == want, ValueError, "expected {} inputs (data, weight{}) with no_bias={}, got {}", want,
             a.no_bias ? "" : ", bias", print_attr(a.no_bias), in.size());
  KILN_CHECK(a.num_hidden >= 1, ValueError, "num_hidden must be >= 1, got {}", a.num_hidden);
  check_float(in[0].dtype, "data");
  for (size_t i = 1; i < in.size(); ++i)
    KILN_CHECK(in[i].dtype == in[0].dtype, TypeError, "{} is {} but data is {}", i == 1 ? "weight" : "bias",
               in[i].dtype, in[0].dtype);
  FullyConnectedDims d = fully_connected_dims(in[0].shape, in[1].shape, a);
  if (!a.no_bias)
    KILN_CHECK(in[2].shape == Shape{a.num_hidden}, ShapeError, "bias must be [{}], got {}", a.num_hidden, in[2].shape);
  out.push_back({d.out, in[0].dtype});
}

// d_data = dy . W, d_W = dy^T . x, d_b = sum of dy over rows, with x and dy
// seen as the matrices [m, k] and [m, n].
void grad_fully_connected(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  const auto& a = g.attrs.as<FullyConnectedAttrs>();
  const Shape xs = b.type(g.inputs[0]).shape;
  FullyConnectedDims d = fully_connected_dims(xs, b.type(g.inputs[1]).shape, a);
  GradValue dy = reshape_to(b, g.out_grads[0], Shape{d.m, d.n});
  if (g.needs_grad[0]) in_grads[0] = reshape_to(b, dot(b, dy, g.inputs[1], false, false), xs);
  if (g.needs_grad[1]) in_grads[1] = dot(b, dy, reshape_to(b, g.inputs[0], Shape{d.m, d.k}), true, false);
  if (!a.no_bias && g.needs_grad[2]) {
    ReduceAttrs sum;
    sum.axis = IntTuple{0};
    in_grads[2] = b.op(OpId::kSum, {dy}, OpAttrs::make(sum));
  }
}

// ---- Activation, LeakyReLU

void infer_float_unary(const OpAttrs&, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_float(in[0].dtype, "data");
  out.push_back(in[0]);
}

// (out_grad, x) -> dx, all of one type.
void infer_unary_backward(const OpAttrs&, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_float(in[0].dtype, "out_grad");
  check_same(in[0], in[1], "out_grad and the forward array");
  out.push_back(in[0]);
}

void grad_activation(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  in_grads[0] = b.op(OpId::kActivationBackward, {g.out_grads[0], g.outputs[0]}, g.attrs);
}

void infer_leaky_relu(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<LeakyReLUAttrs>();
  KILN_CHECK(a.act_type != LeakyType::kRrelu, NotSupported,
             "act_type 'rrelu' is not supported (leaky, elu, selu, gelu, gelu_tanh and prelu are)");
  size_t expected = a.act_type == LeakyType::kPrelu ? 2 : 1;
  KILN_CHECK(in.size() == expected, ValueError, "expected {} for act_type '{}', got {} input(s)",
             expected == 2 ? "2 inputs (data, gamma)" : "1 input (data)", print_attr(a.act_type), in.size());
  check_float(in[0].dtype, "data");
  if (a.act_type == LeakyType::kPrelu) {
    // gamma: one slope per channel (axis 1), or one shared slope.
    const Shape& d = in[0].shape;
    const Shape& g = in[1].shape;
    KILN_CHECK(in[1].dtype == in[0].dtype, TypeError, "gamma's dtype {} differs from data's {}", in[1].dtype,
               in[0].dtype);
    KILN_CHECK(g.ndim() == 1 && (g[0] == 1 || (d.ndim() >= 2 && g[0] == d[1])), ShapeError,
               "prelu's gamma must be [channels] (data's axis 1) or [1], got gamma {} for data {}", g, d);
  }
  out.push_back(in[0]);
}

// prelu: dx = dy * (x > 0 ? 1 : gamma), dgamma = sum of dy * min(x, 0) over all but the channel axis.
void grad_prelu(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  const Shape& xs = g.input_types[0].shape;
  const Shape& gs = g.input_types[1].shape;
  Shape bshape;  // gamma as [1, C, 1, ...] (or all 1s) to broadcast against x
  for (int i = 0; i < xs.ndim(); ++i) bshape.push_back(i == 1 ? gs[0] : 1);
  if (xs.ndim() < 2) bshape = Shape{1};
  GradValue gamma = reshape_to(b, g.inputs[1], bshape);
  GradValue pos = b.op(OpId::kGreaterScalar, {g.inputs[0]}, OpAttrs::make(ScalarAttrs{.scalar = 0}));
  GradValue neg = b.op(OpId::kRMinusScalar, {pos}, OpAttrs::make(ScalarAttrs{.scalar = 1}));
  if (g.needs_grad[0]) {
    GradValue slope = b.op(OpId::kBroadcastAdd, {pos, b.op(OpId::kBroadcastMul, {neg, gamma})});
    in_grads[0] = b.op(OpId::kElemwiseMul, {g.out_grads[0], slope});
  }
  if (g.needs_grad[1]) {
    GradValue part = b.op(OpId::kElemwiseMul, {g.out_grads[0], b.op(OpId::kElemwiseMul, {g.inputs[0], neg})});
    in_grads[1] = reshape_to(b, unbroadcast(b, part, bshape), gs);
  }
}

void grad_leaky_relu(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (g.attrs.as<LeakyReLUAttrs>().act_type == LeakyType::kPrelu) return grad_prelu(b, g, in_grads);
  in_grads[0] = b.op(OpId::kLeakyReLUBackward, {g.out_grads[0], g.inputs[0]}, g.attrs);
}

// ---- Dropout, Flatten

void infer_dropout(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<DropoutAttrs>();
  KILN_CHECK(a.p >= 0 && a.p <= 1, ValueError, "p must be in [0, 1], got {}", a.p);
  check_float(in[0].dtype, "data");
  Shape mask = in[0].shape;
  for (int64_t axis : a.axes) {
    KILN_CHECK(axis >= -mask.ndim() && axis < mask.ndim(), IndexError, "axes entry {} is out of range for {} axes",
               axis, mask.ndim());
    mask[static_cast<int>(axis < 0 ? axis + mask.ndim() : axis)] = 1;
  }
  out.push_back(in[0]);
  out.push_back({mask, in[0].dtype});
}

void grad_dropout(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  GradValue dy = g.out_grads[0], mask = g.outputs[1];
  bool same = b.type(dy).shape == b.type(mask).shape;
  in_grads[0] = b.op(same ? OpId::kElemwiseMul : OpId::kBroadcastMul, {dy, mask});
}

void infer_flatten(const OpAttrs&, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const Shape& s = in[0].shape;
  KILN_CHECK(s.ndim() >= 1, ShapeError, "cannot flatten a scalar");
  int64_t rest = 1;
  for (int i = 1; i < s.ndim(); ++i) rest *= s[i];
  out.push_back({Shape{s[0], rest}, in[0].dtype});
}

void grad_flatten(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  in_grads[0] = reshape_to(b, g.out_grads[0], b.type(g.inputs[0]).shape);
}

// ---- softmax, log_softmax

void check_softmax_attrs(const SoftmaxAttrs& a, const TensorType& t) {
  check_float(t.dtype, "data");
  KILN_CHECK(t.shape.ndim() >= 1, ShapeError, "softmax of a scalar is not defined");
  normalize_axis(a.axis, t.shape.ndim(), "softmax");
  KILN_CHECK(!a.temperature || *a.temperature != 0, ValueError, "temperature must not be 0");
  KILN_CHECK(!a.dtype || *a.dtype == t.dtype, NotSupported, "dtype={} differs from the input's {}", *a.dtype, t.dtype);
}

// softmax(data[, length]): length only with use_length, shaped as data without `axis`.
template <bool kLog>
void infer_softmax(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<SoftmaxAttrs>();
  const bool use_length = a.use_length.value_or(false);
  KILN_CHECK(!(kLog && use_length), NotSupported, "use_length=True is supported by softmax, not log_softmax");
  KILN_CHECK(in.size() == (use_length ? 2u : 1u), ValueError, "expected {} with use_length={}, got {} input(s)",
             use_length ? "2 inputs (data, length)" : "1 input (data)", use_length ? "True" : "False", in.size());
  check_softmax_attrs(a, in[0]);
  if (use_length) {
    const int axis = normalize_axis(a.axis, in[0].shape.ndim(), "softmax");
    Shape want;
    for (int i = 0; i < in[0].shape.ndim(); ++i)
      if (i != axis) want.push_back(in[0].shape[i]);
    KILN_CHECK(in[1].shape == want, ShapeError,
               "length has shape {} but must be data {} without axis {}, {} (one length per row)", in[1].shape,
               in[0].shape, axis, want);
    check_index_dtype(in[1].dtype, "length");
  }
  out.push_back(in[0]);
}

void infer_softmax_backward(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_softmax_attrs(attrs.as<SoftmaxAttrs>(), in[0]);
  check_same(in[0], in[1], "out_grad and the forward output");
  out.push_back(in[0]);
}

template <OpId kBackward>
void grad_softmax(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  in_grads[0] = b.op(kBackward, {g.out_grads[0], g.outputs[0]}, g.attrs);
}

// ---- pick

int pick_axis(const std::optional<int>& axis, const Shape& data) {
  KILN_CHECK(axis.has_value(), NotSupported, "axis=None (pick from the flattened array) is not supported");
  KILN_CHECK(data.ndim() >= 1, ShapeError, "cannot pick from a scalar");
  return normalize_axis(*axis, data.ndim(), "pick");
}

void check_pick_index(const Shape& data, int axis, const TensorType& index) {
  check_index_dtype(index.dtype, "index");
  Shape dropped = pick_out_shape(data, axis, false), kept = pick_out_shape(data, axis, true);
  KILN_CHECK(index.shape == dropped || index.shape == kept, ShapeError,
             "index must be {} (data {} without axis {}) or {}, got {}", dropped, data, axis, kept, index.shape);
}

void infer_pick(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<PickAttrs>();
  int axis = pick_axis(a.axis, in[0].shape);
  check_index_dtype(in[0].dtype, "data");
  check_pick_index(in[0].shape, axis, in[1]);
  out.push_back({pick_out_shape(in[0].shape, axis, a.keepdims), in[0].dtype});
}

void infer_pick_backward(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<PickBackwardAttrs>();
  int axis = pick_axis(a.axis, a.data_shape);
  check_float(in[0].dtype, "out_grad");
  KILN_CHECK(in[0].shape.size() == pick_out_shape(a.data_shape, axis, false).size(), ShapeError,
             "out_grad {} does not fit data_shape {}", in[0].shape, a.data_shape);
  check_pick_index(a.data_shape, axis, in[1]);
  out.push_back({a.data_shape, in[0].dtype});
}

void grad_pick(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  const auto& a = g.attrs.as<PickAttrs>();
  PickBackwardAttrs pb{a.axis, a.keepdims, a.mode, b.type(g.inputs[0]).shape};
  in_grads[0] = b.op(OpId::kPickBackward, {g.out_grads[0], g.inputs[1]}, OpAttrs::make(pb));
}

// ---- softmax cross-entropy

void check_logits_and_labels(const TensorType& data, const TensorType& label) {
  check_float(data.dtype, "data");
  KILN_CHECK(data.shape.ndim() == 2, ShapeError, "data must be [batch, classes], got {}", data.shape);
  check_index_dtype(label.dtype, "label");
  const int64_t n = data.shape[0];
  KILN_CHECK(label.shape == Shape{n} || label.shape == (Shape{n, 1}), ShapeError,
             "label must be [{}] (one class id per row of data {}), got {}", n, data.shape, label.shape);
}

void infer_softmax_cross_entropy(const OpAttrs&, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_logits_and_labels(in[0], in[1]);
  out.push_back({Shape{in[0].shape[0]}, in[0].dtype});
}

void infer_softmax_cross_entropy_backward(const OpAttrs&, std::span<const TensorType> in,
                                          std::vector<TensorType>& out) {
  check_logits_and_labels(in[1], in[2]);
  KILN_CHECK(in[0] == (TensorType{Shape{in[1].shape[0]}, in[1].dtype}), ShapeError, "out_grad must be {}[{}], got {}{}",
             dtype_short_name(in[1].dtype), in[1].shape[0], dtype_short_name(in[0].dtype), in[0].shape);
  out.push_back(in[1]);
}

void grad_softmax_cross_entropy(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  in_grads[0] = b.op(OpId::kSoftmaxCrossEntropyBackward, {g.out_grads[0], g.inputs[0], g.inputs[1]});
}

// ---- Embedding

}  // namespace

void check_embedding_id(int64_t id, size_t position, int64_t input_dim) {
  KILN_CHECK(id >= 0 && id < input_dim, IndexError,
             "Embedding: token id {} (element {} of data) is out of range for a vocabulary of {} (input_dim)", id,
             position, input_dim);
}

namespace {

void infer_embedding(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<EmbeddingAttrs>();
  check_index_dtype(in[0].dtype, "data");
  check_float(in[1].dtype, "weight");
  KILN_CHECK(a.input_dim > 0 && a.output_dim > 0, ValueError, "input_dim and output_dim must be positive, got {} and {}",
             a.input_dim, a.output_dim);
  KILN_CHECK(in[1].shape == (Shape{a.input_dim, a.output_dim}), ShapeError,
             "weight must be [input_dim, output_dim] = [{}, {}], got {}", a.input_dim, a.output_dim, in[1].shape);
  KILN_CHECK(a.dtype == in[1].dtype, TypeError, "dtype={} differs from weight's {}", a.dtype, in[1].dtype);
  KILN_CHECK(in[0].shape.ndim() < Shape::kMaxNdim, ShapeError, "the result would have {} axes; Kiln supports at most {}",
             in[0].shape.ndim() + 1, Shape::kMaxNdim);
  Shape o = in[0].shape;
  o.push_back(a.output_dim);
  out.push_back({o, in[1].dtype});
}

// The weight's gradient scatters dy's rows back to the rows the ids picked
// (a scatter-add: repeated ids accumulate); the ids get none.
void grad_embedding(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[1]) return;
  const Shape& ws = g.input_types[1].shape;
  const int64_t rows = g.input_types[0].shape.size();
  GradValue dy = grad_ops::reshape_to(b, g.out_grads[0], Shape{rows, ws[1]});
  GradValue ids = grad_ops::reshape_to(b, g.inputs[0], Shape{rows});
  in_grads[1] = b.op(OpId::kTakeBackward, {dy, ids}, OpAttrs::make(TakeBackwardAttrs{0, TakeMode::kClip, ws}));
}

// ---- add_n
// ---- add_n

void infer_add_n(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<AddNAttrs>();
  KILN_CHECK(a.num_args >= 1 && static_cast<size_t>(a.num_args) == in.size(), ValueError,
             "num_args={} but {} inputs were given", a.num_args, in.size());
  KILN_CHECK(is_floating(in[0].dtype) || in[0].dtype == DType::kInt32 || in[0].dtype == DType::kInt64, TypeError,
             "expected float32, float64, float16, bfloat16, int32 or int64 inputs, got {}", in[0].dtype);
  for (size_t i = 1; i < in.size(); ++i)
    KILN_CHECK(in[i] == in[0], ShapeError, "input {} is {}{} but input 0 is {}{}", i, dtype_short_name(in[i].dtype),
               in[i].shape, dtype_short_name(in[0].dtype), in[0].shape);
  out.push_back(in[0]);
}

void grad_add_n(GradBuilder&, const GradArgs& g, std::span<GradValue> in_grads) {
  for (size_t i = 0; i < in_grads.size(); ++i)
    if (g.needs_grad[i]) in_grads[i] = g.out_grads[0];
}

// ---- definitions

OpDef& define(OpRegistry& r, OpId id, std::string_view doc, std::vector<std::string_view> inputs, InferFn infer,
              ParseAttrsFn parse = nullptr) {
  OpDef& d = r.define(id, doc);
  d.num_inputs = static_cast<int>(inputs.size());
  d.input_names = std::move(inputs);
  d.infer = infer;
  d.parse_attrs = parse;
  return d;
}

// A backward op; its own gradient (for higher orders) is in ir/ops/nn_grad.cc.
void define_backward(OpRegistry& r, OpId id, std::string_view doc, std::vector<std::string_view> inputs, InferFn infer,
                     ParseAttrsFn parse = nullptr) {
  define(r, id, doc, std::move(inputs), infer, parse);
}

void define_layers(OpRegistry& r) {
  OpDef& fc =
      define(r, OpId::kFullyConnected, "data . weight^T + bias, data flattened to a matrix unless flatten=False.", {},
             infer_fully_connected, parse_attrs_as<FullyConnectedAttrs>);
  fc.num_inputs = -1;  // 2 or 3, per no_bias
  fc.grad = grad_fully_connected;

  OpDef& act = define(r, OpId::kActivation, "relu, sigmoid, tanh, softrelu or softsign, elementwise.", {"data"},
                      infer_float_unary, parse_attrs_as<ActivationAttrs>);
  act.inplace = {{0, 0}};
  act.grad = grad_activation;
  act.grad_uses_inputs = false;
  act.grad_uses_outputs = true;
  define_backward(r, OpId::kActivationBackward, "Gradient of Activation from out_grad and the forward output.",
                  {"out_grad", "output"}, infer_unary_backward, parse_attrs_as<ActivationAttrs>);
  r.defined(OpId::kActivationBackward).inplace = {{0, 0}};  // elementwise: dx may overwrite out_grad

  OpDef& leaky = define(r, OpId::kLeakyReLU,
                        "leaky, elu, selu, gelu, gelu_tanh (elementwise) or prelu (a learned slope per channel).", {},
                        infer_leaky_relu, parse_attrs_as<LeakyReLUAttrs>);
  leaky.num_inputs = -1;  // prelu adds gamma
  leaky.grad = grad_leaky_relu;
  define_backward(r, OpId::kLeakyReLUBackward, "Gradient of LeakyReLU from out_grad and the forward input.",
                  {"out_grad", "data"}, infer_unary_backward, parse_attrs_as<LeakyReLUAttrs>);

  OpDef& dropout = define(r, OpId::kDropout, "data * mask with mask 1/(1-p) or 0 in train mode; (out, mask).", {"data"},
                          infer_dropout, parse_attrs_as<DropoutAttrs>);
  dropout.grad = grad_dropout;
  dropout.grad_uses_inputs = false;
  dropout.grad_uses_outputs = true;
  dropout.grad_unused_outputs = 1;  // the output: grad_dropout reads the mask only

  OpDef& flatten = define(r, OpId::kFlatten, "Reshapes [d0, d1, ...] to [d0, d1*...].", {"data"}, infer_flatten);
  flatten.grad = grad_flatten;
  flatten.inplace = {{0, 0}};  // same elements, same order: may take over its input's storage
  r.alias("flatten", OpId::kFlatten);
}

void define_softmax(OpRegistry& r) {
  OpDef& softmax =
      define(r, OpId::kSoftmax, "exp(x / T) normalized along axis (the first length[row] elements with use_length).",
             {"data", "length"}, infer_softmax<false>, parse_attrs_as<SoftmaxAttrs>);
  softmax.num_inputs = -1;  // 1, or 2 with use_length
  softmax.grad = grad_softmax<OpId::kSoftmaxBackward>;
  OpDef& log_softmax = define(r, OpId::kLogSoftmax, "Log of softmax along axis.", {"data"}, infer_softmax<true>,
                              parse_attrs_as<SoftmaxAttrs>);
  log_softmax.grad = grad_softmax<OpId::kLogSoftmaxBackward>;
  for (OpDef* d : {&softmax, &log_softmax}) {
    d->grad_uses_inputs = false;
    d->grad_uses_outputs = true;
  }
  define_backward(r, OpId::kSoftmaxBackward, "Gradient of softmax from out_grad and the forward output.",
                  {"out_grad", "output"}, infer_softmax_backward, parse_attrs_as<SoftmaxAttrs>);
  define_backward(r, OpId::kLogSoftmaxBackward, "Gradient of log_softmax from out_grad and the forward output.",
                  {"out_grad", "output"}, infer_softmax_backward, parse_attrs_as<SoftmaxAttrs>);

  define(r, OpId::kPick, "data's elements along axis at the positions in index.", {"data", "index"}, infer_pick,
         parse_attrs_as<PickAttrs>)
      .grad = grad_pick;
  define_backward(r, OpId::kPickBackward, "Gradient of pick: out_grad scattered into zeros of data_shape.",
                  {"out_grad", "index"}, infer_pick_backward, parse_attrs_as<PickBackwardAttrs>);

  define(r, OpId::kSoftmaxCrossEntropy, "Per-row logsumexp(data) - data[label]: sparse softmax cross-entropy.",
         {"data", "label"}, infer_softmax_cross_entropy)
      .grad = grad_softmax_cross_entropy;
  define_backward(r, OpId::kSoftmaxCrossEntropyBackward,
                  "Gradient of _kiln_softmax_cross_entropy: (softmax(data) - onehot(label)) * out_grad.",
                  {"out_grad", "data", "label"}, infer_softmax_cross_entropy_backward);

  OpDef& embedding = define(r, OpId::kEmbedding, "Rows of weight picked by the token ids in data.",
                            {"data", "weight"}, infer_embedding, parse_attrs_as<EmbeddingAttrs>);
  embedding.grad = grad_embedding;

  OpDef& add_n = define(r, OpId::kAddN, "Elementwise sum of num_args arrays of one shape.", {}, infer_add_n,
                        parse_attrs_as<AddNAttrs>);
  add_n.num_inputs = -1;
  add_n.grad = grad_add_n;
  add_n.grad_uses_inputs = false;
  r.alias("ElementWiseSum", OpId::kAddN);
}

}  // namespace

void register_nn_ops(OpRegistry& r) {
  define_layers(r);
  define_softmax(r);
}

}  // namespace kiln
