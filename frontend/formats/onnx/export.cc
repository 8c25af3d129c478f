// ir::Graph -> onnx.ModelProto (contract: frontend/formats/onnx/export.h).
#include "frontend/formats/onnx/export.h"

#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <fmt/ranges.h>

#include "frontend/formats/mxnet/export.h"
#include "frontend/formats/onnx/model.h"
#include "frontend/formats/onnx/tensor.h"
#include "frontend/nd_init.h"
#include "ir/ops/attention.h"
#include "ir/ops/conv.h"
#include "ir/ops/conv_layout.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/layer_norm.h"
#include "ir/ops/linalg.h"
#include "ir/ops/matrix.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"

namespace kiln::onnx {
namespace {

int32_t onnx_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return pb::TensorProto::FLOAT;
    case DType::kFloat64: return pb::TensorProto::DOUBLE;
    case DType::kFloat16: return pb::TensorProto::FLOAT16;
    case DType::kBfloat16: return pb::TensorProto::BFLOAT16;
    case DType::kUint8: return pb::TensorProto::UINT8;
    case DType::kInt8: return pb::TensorProto::INT8;
    case DType::kInt16: return pb::TensorProto::INT16;
    case DType::kUint16: return pb::TensorProto::UINT16;
    case DType::kInt32: return pb::TensorProto::INT32;
    case DType::kUint32: return pb::TensorProto::UINT32;
    case DType::kInt64: return pb::TensorProto::INT64;
    case DType::kUint64: return pb::TensorProto::UINT64;
    case DType::kBool: return pb::TensorProto::BOOL;
  }
  return pb::TensorProto::UNDEFINED;
}

// `batch_symbol` non-empty: dim 0 is that symbol.
void set_type(pb::ValueInfoProto* v, const std::string& name, const TensorType& t, const std::string& batch_symbol = {}) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx_dtype(t.dtype));
  auto* shape = tt->mutable_shape();
  for (int d = 0; d < t.shape.ndim(); ++d) {
    if (d == 0 && !batch_symbol.empty()) shape->add_dim()->set_dim_param(batch_symbol);
    else shape->add_dim()->set_dim_value(t.shape[d]);
  }
}

class Writer {
 public:
  Writer(const ir::Graph& g, int opset, const NameMap& input_names, std::optional<int64_t> batch)
      : g_(g), opset_(opset), batch_(batch), input_names_(input_names) {
    for (const ir::Node& n : g.nodes()) used_.insert(n.name);
    for (auto& [_, name] : input_names) used_.insert(name);
  }

  int opset() const { return opset_; }
  std::optional<int64_t> batch() const { return batch_; }  // set under dynamic_batch
  pb::GraphProto& graph() { return *model_.mutable_graph(); }
  pb::ModelProto& model() { return model_; }
  const ir::Graph& g() const { return g_; }

  std::string value(ir::Entry e) const {
    const ir::Node& n = g_.node(e.node);
    if (n.kind == ir::NodeKind::kInput)
      if (auto it = input_names_.find(n.name); it != input_names_.end()) return it->second;
    return e.index == 0 ? n.name : fmt::format("{}:{}", n.name, e.index);
  }
  std::string in(const ir::Node& n, size_t i) const { return value(n.inputs.at(i)); }
  const TensorType& in_type(const ir::Node& n, size_t i) const { return g_.type(n.inputs.at(i)); }
  std::string out(const ir::Node& n, int k = 0) const { return value({static_cast<ir::NodeId>(&n - g_.nodes().data()), k}); }

  // A name no node and no earlier helper has.
  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int k = 1; used_.contains(name); ++k) name = fmt::format("{}_{}", base, k);
    used_.insert(name);
    return name;
  }

  pb::NodeProto* node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                      const std::string& name) {
    pb::NodeProto* p = graph().add_node();
    p->set_op_type(op);
    p->set_name(fresh(name + "/" + op));
    for (auto& s : inputs) p->add_input(s);
    for (auto& s : outputs) p->add_output(s);
    return p;
  }

  void initializer(const std::string& name, const NDArray& value) {
    NDArray host = value.device() == Device::cpu(0) ? value : value.copy_to(Device::cpu(0));
    host.wait_to_read();
    pb::TensorProto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx_dtype(host.dtype()));
    for (int64_t d : host.shape()) t->add_dims(d);
    t->set_raw_data(host.data(), host.nbytes());
  }
  std::string constant(const std::string& base, const NDArray& value) {
    std::string name = fresh(base);
    initializer(name, value);
    return name;
  }
  std::string int64s(const std::string& base, const std::vector<int64_t>& v) {
    return constant(base, nd::array(v, Shape{static_cast<int64_t>(v.size())}));
  }
  std::string scalar(const std::string& base, double v, DType dtype) {
    return constant(base, nd::full(Shape{}, v, {dtype, Device::cpu(0)}));
  }

 private:
  const ir::Graph& g_;
  int opset_;
  std::optional<int64_t> batch_;
  const NameMap& input_names_;
  pb::ModelProto model_;
  std::set<std::string> used_;
};

void attr(pb::NodeProto* p, const std::string& name, int64_t v) {
  auto* a = p->add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INT);
  a->set_i(v);
}
void attr(pb::NodeProto* p, const std::string& name, double v) {
  auto* a = p->add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::FLOAT);
  a->set_f(static_cast<float>(v));
}
void attr(pb::NodeProto* p, const std::string& name, std::span<const int64_t> v) {
  auto* a = p->add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

[[noreturn]] void unsupported(const ir::Node& n, const std::string& what) {
  throw NotSupported(fmt::format("ONNX export: node '{}' ({}): {} has no ONNX form yet", n.name, op_def(n.op).name, what));
}

// ---- one writer per Kiln op

using WriteFn = void (*)(Writer& w, const ir::Node& n);

template <const char* kOp>
void unary(Writer& w, const ir::Node& n) {
  w.node(kOp, {w.in(n, 0)}, {w.out(n)}, n.name);
}
template <const char* kOp>
void binary(Writer& w, const ir::Node& n) {
  w.node(kOp, {w.in(n, 0), w.in(n, 1)}, {w.out(n)}, n.name);
}
// x OP scalar (or scalar OP x when kReversed), the scalar in x's dtype.
template <const char* kOp, bool kReversed = false>
void with_scalar(Writer& w, const ir::Node& n) {
  std::string s = w.scalar(n.name + "/scalar", n.attrs.as<ScalarAttrs>().scalar, w.in_type(n, 0).dtype);
  if (kReversed) w.node(kOp, {s, w.in(n, 0)}, {w.out(n)}, n.name);
  else w.node(kOp, {w.in(n, 0), s}, {w.out(n)}, n.name);
}

constexpr char kAdd[] = "Add", kSub[] = "Sub", kMul[] = "Mul", kDiv[] = "Div", kPow[] = "Pow", kMax[] = "Max",
               kMin[] = "Min", kRelu[] = "Relu", kSigmoid[] = "Sigmoid", kTanh[] = "Tanh", kExp[] = "Exp",
               kLog[] = "Log", kSqrt[] = "Sqrt", kAbs[] = "Abs", kNeg[] = "Neg", kIdentity[] = "Identity",
               kErf[] = "Erf", kSin[] = "Sin", kCos[] = "Cos", kTan[] = "Tan", kAsin[] = "Asin", kAcos[] = "Acos",
               kAtan[] = "Atan", kSinh[] = "Sinh", kCosh[] = "Cosh", kAsinh[] = "Asinh", kAcosh[] = "Acosh",
               kAtanh[] = "Atanh", kRound[] = "Round", kCeil[] = "Ceil", kFloor[] = "Floor", kSign[] = "Sign";

// Mod: fmod 1 (C's fmod), or fmod 0 (the divisor's sign), which ONNX
// allows for integers only.
template <int64_t kFmod>
void write_mod(Writer& w, const ir::Node& n) {
  if (kFmod == 0 && is_floating(w.in_type(n, 0).dtype)) unsupported(n, "floating-point mod (ONNX's Mod needs fmod=1)");
  attr(w.node("Mod", {w.in(n, 0), w.in(n, 1)}, {w.out(n)}, n.name), "fmod", kFmod);
}

void write_activation(Writer& w, const ir::Node& n) {
  static const std::map<ActType, const char*> ops{{ActType::kRelu, "Relu"}, {ActType::kSigmoid, "Sigmoid"},
                                                  {ActType::kTanh, "Tanh"}, {ActType::kSoftrelu, "Softplus"},
                                                  {ActType::kSoftsign, "Softsign"}};
  w.node(ops.at(n.attrs.as<ActivationAttrs>().act_type), {w.in(n, 0)}, {w.out(n)}, n.name);
}

void write_gelu(Writer& w, const ir::Node& n);

void write_leaky_relu(Writer& w, const ir::Node& n) {
  const auto& a = n.attrs.as<LeakyReLUAttrs>();
  if (a.act_type == LeakyType::kLeaky) {
    attr(w.node("LeakyRelu", {w.in(n, 0)}, {w.out(n)}, n.name), "alpha", a.slope);
  } else if (a.act_type == LeakyType::kElu) {
    attr(w.node("Elu", {w.in(n, 0)}, {w.out(n)}, n.name), "alpha", a.slope);
  } else if (a.act_type == LeakyType::kPrelu) {
    // Kiln's slope is per channel (axis 1); ONNX broadcasts it from the right.
    const int rank = w.in_type(n, 0).shape.ndim();
    std::vector<int64_t> dims{w.in_type(n, 1).shape.size()};
    for (int d = 2; d < rank; ++d) dims.push_back(1);
    std::string slope = w.fresh(n.name + "/slope");
    w.node("Reshape", {w.in(n, 1), w.int64s(n.name + "/slope_shape", dims)}, {slope}, n.name);
    w.node("PRelu", {w.in(n, 0), slope}, {w.out(n)}, n.name);
  } else if (a.act_type == LeakyType::kGelu) {
    write_gelu(w, n);
  } else {
    unsupported(n, "this LeakyReLU act_type");
  }
}

void write_clip(Writer& w, const ir::Node& n) {
  const auto& a = n.attrs.as<ClipAttrs>();
  DType t = w.in_type(n, 0).dtype;
  w.node("Clip", {w.in(n, 0), w.scalar(n.name + "/min", a.a_min, t), w.scalar(n.name + "/max", a.a_max, t)}, {w.out(n)},
         n.name);
}

void write_convolution(Writer& w, const ir::Node& n) {
  const auto& a = n.attrs.as<ConvolutionAttrs>();
  if (channels_last(a.layout)) unsupported(n, fmt::format("layout '{}' (ONNX's Conv is channel-first)", *a.layout));
  WindowGeometry geo = convolution_geometry(a, w.in_type(n, 0).shape);
  std::vector<std::string> in{w.in(n, 0), w.in(n, 1)};
  if (!a.no_bias) in.push_back(w.in(n, 2));
  pb::NodeProto* p = w.node("Conv", in, {w.out(n)}, n.name);
  std::vector<int64_t> kernel, stride, dilate, pads;
  for (int i = 0; i < geo.nsp; ++i) {
    kernel.push_back(geo.kernel[static_cast<size_t>(i)]);
    stride.push_back(geo.stride[static_cast<size_t>(i)]);
    dilate.push_back(geo.dilate[static_cast<size_t>(i)]);
    pads.push_back(geo.pad_l[static_cast<size_t>(i)]);
  }
  for (int i = 0; i < geo.nsp; ++i) pads.push_back(geo.pad_r[static_cast<size_t>(i)]);
  attr(p, "kernel_shape", kernel);
  attr(p, "strides", stride);
  attr(p, "dilations", dilate);
  attr(p, "pads", pads);
  attr(p, "group", int64_t{a.num_group});
}

void write_pooling(Writer& w, const ir::Node& n) {
  const auto& a = n.attrs.as<PoolingAttrs>();
  PoolType type = pool_type(a);
  if (type == PoolType::kSum) unsupported(n, "sum pooling");
  if (channels_last(a.layout)) unsupported(n, fmt::format("layout '{}' (ONNX's pooling is channel-first)", *a.layout));
  if (a.global_pool) {
    w.node(type == PoolType::kMax ? "GlobalMaxPool" : "GlobalAveragePool", {w.in(n, 0)}, {w.out(n)}, n.name);
    return;
  }
  // "full" (ceil) rounding is in the geometry's right pads, which max pooling
  // may write out as pads; an average would count them.
  if (a.pooling_convention != "valid" && type != PoolType::kMax)
    unsupported(n, fmt::format("average pooling with pooling_convention '{}'", a.pooling_convention));
  WindowGeometry geo = pooling_geometry(a, w.in_type(n, 0).shape);
  pb::NodeProto* p = w.node(type == PoolType::kMax ? "MaxPool" : "AveragePool", {w.in(n, 0)}, {w.out(n)}, n.name);
  std::vector<int64_t> kernel, stride, dilate, pads;
  bool dilated = false;
  for (int i = 0; i < geo.nsp; ++i) {
    kernel.push_back(geo.kernel[static_cast<size_t>(i)]);
    stride.push_back(geo.stride[static_cast<size_t>(i)]);
    dilate.push_back(geo.dilate[static_cast<size_t>(i)]);
    dilated = dilated || dilate.back() != 1;
    pads.push_back(geo.pad_l[static_cast<size_t>(i)]);
  }
  for (int i = 0; i < geo.nsp; ++i) pads.push_back(geo.pad_r[static_cast<size_t>(i)]);
  attr(p, "kernel_shape", kernel);
  attr(p, "strides", stride);
  if (dilated) attr(p, "dilations", dilate);  // MaxPool only: the geometry admits no dilated average
  attr(p, "pads", pads);
  if (type == PoolType::kAvg) attr(p, "count_include_pad", int64_t{pool_count_include_pad(a) ? 1 : 0});
}

void write_batch_norm(Writer& w, const ir::Node& n) {
  const auto& a = n.attrs.as<BatchNormAttrs>();
  if (a.axis != 1) unsupported(n, fmt::format("BatchNorm over axis {}", a.axis));
  for (int k = 1; k < n.num_outputs(); ++k) {
    for (const ir::Node& m : w.g().nodes())
      for (const ir::Entry& e : m.inputs)
        if (&w.g().node(e.node) == &n && e.index == k) unsupported(n, "a read of BatchNorm's batch statistics");
    for (const ir::Entry& e : w.g().outputs())
      if (&w.g().node(e.node) == &n && e.index == k) unsupported(n, "BatchNorm's batch statistics as outputs");
  }
  std::string gamma = w.in(n, 1);
  if (a.fix_gamma) {  // gamma is read as 1
    const TensorType& t = w.in_type(n, 1);
    gamma = w.constant(n.name + "/ones", nd::ones(t.shape, {t.dtype, Device::cpu(0)}));
  }
  pb::NodeProto* p = w.node("BatchNormalization", {w.in(n, 0), gamma, w.in(n, 2), w.in(n, 3), w.in(n, 4)}, {w.out(n)}, n.name);
  attr(p, "epsilon", a.eps);
  attr(p, "momentum", static_cast<double>(a.momentum));
}

// x [..., K] . W^T + b on the last axis: MatMul with W transposed, then Add.
void write_fully_connected_last_axis(Writer& w, const ir::Node& n, const FullyConnectedAttrs& a) {
  std::string wt = w.fresh(n.name + "/weight_t");
  attr(w.node("Transpose", {w.in(n, 1)}, {wt}, n.name), "perm", std::vector<int64_t>{1, 0});
  if (a.no_bias) {
    w.node("MatMul", {w.in(n, 0), wt}, {w.out(n)}, n.name);
    return;
  }
  std::string product = w.fresh(n.name + "/matmul");
  w.node("MatMul", {w.in(n, 0), wt}, {product}, n.name);
  w.node("Add", {product, w.in(n, 2)}, {w.out(n)}, n.name);
}

void write_fully_connected(Writer& w, const ir::Node& n) {
  const auto& a = n.attrs.as<FullyConnectedAttrs>();
  std::string x = w.in(n, 0);
  const Shape& xs = w.in_type(n, 0).shape;
  if (xs.ndim() != 2) {
    if (!a.flatten) return write_fully_connected_last_axis(w, n, a);
    x = w.fresh(n.name + "/flat");
    attr(w.node("Flatten", {w.in(n, 0)}, {x}, n.name), "axis", int64_t{1});
  }
  std::vector<std::string> in{x, w.in(n, 1)};
  if (!a.no_bias) in.push_back(w.in(n, 2));
  attr(w.node("Gemm", in, {w.out(n)}, n.name), "transB", int64_t{1});
}

void write_dot(Writer& w, const ir::Node& n) {
  const auto& a = n.attrs.as<DotAttrs>();
  if (w.in_type(n, 0).shape.ndim() != 2 || w.in_type(n, 1).shape.ndim() != 2) unsupported(n, "dot of rank-3+ arrays");
  pb::NodeProto* p = w.node("Gemm", {w.in(n, 0), w.in(n, 1)}, {w.out(n)}, n.name);
  attr(p, "transA", int64_t{a.transpose_a ? 1 : 0});
  attr(p, "transB", int64_t{a.transpose_b ? 1 : 0});
}

// Layout ops: the target is the shape the graph inferred.
void write_reshape(Writer& w, const ir::Node& n) {
  std::vector<int64_t> dims = n.types[0].shape.to_vector();
  if (w.batch()) {
    const Shape& in = w.in_type(n, 0).shape;
    if (dims.empty() || in.ndim() == 0 || dims[0] != *w.batch() || in[0] != *w.batch())
      unsupported(n, fmt::format("a dynamic batch through a Reshape from {} to {}", in, n.types[0].shape));
    dims[0] = 0;  // ONNX: copy the input's dim 0
  }
  w.node("Reshape", {w.in(n, 0), w.int64s(n.name + "/shape", dims)}, {w.out(n)}, n.name);
}

void write_transpose(Writer& w, const ir::Node& n) {
  IntTuple axes = n.attrs.as<TransposeAttrs>().axes;
  const int rank = w.in_type(n, 0).shape.ndim();
  if (axes.empty())
    for (int d = rank - 1; d >= 0; --d) axes.push_back(d);
  for (int64_t& x : axes) x = x < 0 ? x + rank : x;
  attr(w.node("Transpose", {w.in(n, 0)}, {w.out(n)}, n.name), "perm", axes);
}

void write_concat(Writer& w, const ir::Node& n) {
  std::vector<std::string> in;
  for (size_t i = 0; i < n.inputs.size(); ++i) in.push_back(w.in(n, i));
  int rank = w.in_type(n, 0).shape.ndim();
  int dim = n.attrs.as<ConcatAttrs>().dim;
  attr(w.node("Concat", in, {w.out(n)}, n.name), "axis", int64_t{dim < 0 ? dim + rank : dim});
}

void write_softmax_like(Writer& w, const ir::Node& n, const char* op) {
  const auto& a = n.attrs.as<SoftmaxAttrs>();
  if (a.temperature && *a.temperature != 1.0) unsupported(n, "softmax with a temperature");
  attr(w.node(op, {w.in(n, 0)}, {w.out(n)}, n.name), "axis", int64_t{a.axis});
}
void write_softmax(Writer& w, const ir::Node& n) { write_softmax_like(w, n, "Softmax"); }
void write_log_softmax(Writer& w, const ir::Node& n) { write_softmax_like(w, n, "LogSoftmax"); }

void write_flatten(Writer& w, const ir::Node& n) {
  attr(w.node("Flatten", {w.in(n, 0)}, {w.out(n)}, n.name), "axis", int64_t{1});
}

void write_dropout(Writer& w, const ir::Node& n) {  // inference: the identity
  w.node("Identity", {w.in(n, 0)}, {w.out(n)}, n.name);
}

void write_reduce(Writer& w, const ir::Node& n, const char* op) {
  const auto& a = n.attrs.as<ReduceAttrs>();
  if (a.exclude) unsupported(n, "a reduction with exclude");
  const int rank = w.in_type(n, 0).shape.ndim();
  std::vector<int64_t> axes;
  if (a.axis)
    for (int64_t x : *a.axis) axes.push_back(x < 0 ? x + rank : x);
  else
    for (int d = 0; d < rank; ++d) axes.push_back(d);
  pb::NodeProto* p;
  if (std::string_view(op) == "ReduceSum") {
    p = w.node(op, {w.in(n, 0), w.int64s(n.name + "/axes", axes)}, {w.out(n)}, n.name);
  } else {
    p = w.node(op, {w.in(n, 0)}, {w.out(n)}, n.name);
    attr(p, "axes", axes);
  }
  attr(p, "keepdims", int64_t{a.keepdims ? 1 : 0});
}
void write_sum(Writer& w, const ir::Node& n) { write_reduce(w, n, "ReduceSum"); }
void write_mean(Writer& w, const ir::Node& n) { write_reduce(w, n, "ReduceMean"); }
void write_max(Writer& w, const ir::Node& n) { write_reduce(w, n, "ReduceMax"); }

// ---- the sequence models' ops

void write_embedding(Writer& w, const ir::Node& n) {  // weight rows by id
  attr(w.node("Gather", {w.in(n, 1), w.in(n, 0)}, {w.out(n)}, n.name), "axis", int64_t{0});
}

void write_layer_norm(Writer& w, const ir::Node& n) {
  const auto& a = n.attrs.as<LayerNormAttrs>();
  if (w.opset() < 17) unsupported(n, fmt::format("LayerNorm at opset {} (LayerNormalization needs 17)", w.opset()));
  if (a.output_mean_var) unsupported(n, "LayerNorm's mean and std outputs");
  pb::NodeProto* p = w.node("LayerNormalization", {w.in(n, 0), w.in(n, 1), w.in(n, 2)}, {w.out(n)}, n.name);
  attr(p, "axis", int64_t{a.axis});
  attr(p, "epsilon", a.eps);
}

// GELU as ONNX writes it before opset 20: x * 0.5 * (1 + erf(x / sqrt 2)),
// the chain Kiln's importer folds back into one gelu (patterns.cc).
void write_gelu(Writer& w, const ir::Node& n) {
  DType t = w.in_type(n, 0).dtype;
  std::string x = w.in(n, 0), scaled = w.fresh(n.name + "/div"), erf = w.fresh(n.name + "/erf"),
              one_plus = w.fresh(n.name + "/add"), times_x = w.fresh(n.name + "/mul");
  w.node("Div", {x, w.scalar(n.name + "/sqrt2", std::sqrt(2.0), t)}, {scaled}, n.name);
  w.node("Erf", {scaled}, {erf}, n.name);
  w.node("Add", {erf, w.scalar(n.name + "/one", 1.0, t)}, {one_plus}, n.name);
  w.node("Mul", {x, one_plus}, {times_x}, n.name);
  w.node("Mul", {times_x, w.scalar(n.name + "/half", 0.5, t)}, {w.out(n)}, n.name);
}

void write_slice_axis(Writer& w, const ir::Node& n) {
  const auto& a = n.attrs.as<SliceAxisAttrs>();
  const Shape& xs = w.in_type(n, 0).shape;
  const int axis = a.axis < 0 ? a.axis + xs.ndim() : a.axis;
  const int64_t len = xs[axis];
  const int64_t begin = a.begin < 0 ? a.begin + len : a.begin;
  const int64_t end = !a.end ? len : (*a.end < 0 ? *a.end + len : *a.end);
  w.node("Slice",
         {w.in(n, 0), w.int64s(n.name + "/starts", {begin}), w.int64s(n.name + "/ends", {end}),
          w.int64s(n.name + "/axes", {axis})},
         {w.out(n)}, n.name);
}

void write_expand_dims(Writer& w, const ir::Node& n) {
  const int rank = n.types[0].shape.ndim();
  const int axis = n.attrs.as<ExpandDimsAttrs>().axis;
  w.node("Unsqueeze", {w.in(n, 0), w.int64s(n.name + "/axes", {axis < 0 ? axis + rank : axis})}, {w.out(n)}, n.name);
}

void write_split(Writer& w, const ir::Node& n) {
  const auto& a = n.attrs.as<SplitAttrs>();
  const int rank = w.in_type(n, 0).shape.ndim();
  const int64_t axis = a.axis < 0 ? a.axis + rank : a.axis;
  std::vector<std::string> parts;
  for (int k = 0; k < a.num_outputs; ++k) parts.push_back(a.squeeze_axis ? w.fresh(n.name + "/part") : w.out(n, k));
  attr(w.node("Split", {w.in(n, 0)}, parts, n.name), "axis", axis);
  if (!a.squeeze_axis) return;
  for (int k = 0; k < a.num_outputs; ++k)
    w.node("Squeeze", {parts[static_cast<size_t>(k)], w.int64s(n.name + "/axes", {axis})}, {w.out(n, k)}, n.name);
}

// batch_dot: MatMul of the last two axes, with Transposes where asked.
void write_batch_dot(Writer& w, const ir::Node& n) {
  const auto& a = n.attrs.as<DotAttrs>();
  auto operand = [&](size_t i, bool transpose) {
    if (!transpose) return w.in(n, i);
    const int rank = w.in_type(n, i).shape.ndim();
    std::vector<int64_t> perm;
    for (int d = 0; d < rank; ++d) perm.push_back(d);
    std::swap(perm[static_cast<size_t>(rank - 1)], perm[static_cast<size_t>(rank - 2)]);
    std::string t = w.fresh(n.name + "/transposed");
    attr(w.node("Transpose", {w.in(n, i)}, {t}, n.name), "perm", perm);
    return t;
  };
  std::string lhs = operand(0, a.transpose_a), rhs = operand(1, a.transpose_b);
  w.node("MatMul", {lhs, rhs}, {w.out(n)}, n.name);
}

void write_add_n(Writer& w, const ir::Node& n) {
  std::vector<std::string> in;
  for (size_t i = 0; i < n.inputs.size(); ++i) in.push_back(w.in(n, i));
  w.node("Sum", in, {w.out(n)}, n.name);
}

// Whether any node or graph output reads output k of n.
bool output_is_read(Writer& w, const ir::Node& n, int k) {
  for (const ir::Node& m : w.g().nodes())
    for (const ir::Entry& e : m.inputs)
      if (&w.g().node(e.node) == &n && e.index == k) return true;
  for (const ir::Entry& e : w.g().outputs())
    if (&w.g().node(e.node) == &n && e.index == k) return true;
  return false;
}

// _kiln_attention as its decomposition: MatMul(q, Transpose(k)) * scale,
// plus a constant 0 / lowest-value [Tq, Tk] bias when causal, Softmax over
// the keys, MatMul with v.
void write_attention(Writer& w, const ir::Node& n) {
  if (output_is_read(w, n, 1)) unsupported(n, "a read of attention's logsumexp output");
  const Shape &qs = w.in_type(n, 0).shape, &ks = w.in_type(n, 1).shape;
  const DType t = w.in_type(n, 0).dtype;
  const AttentionDims d = attention_dims(n.attrs.as<AttentionAttrs>(), qs, ks, w.in_type(n, 2).shape);
  const int rank = qs.ndim();
  std::vector<int64_t> perm;
  for (int i = 0; i < rank; ++i) perm.push_back(i);
  std::swap(perm[rank - 1], perm[rank - 2]);
  std::string kt = w.fresh(n.name + "/key_t");
  attr(w.node("Transpose", {w.in(n, 1)}, {kt}, n.name), "perm", perm);
  std::string scores = w.fresh(n.name + "/scores");
  w.node("MatMul", {w.in(n, 0), kt}, {scores}, n.name);
  std::string scaled = w.fresh(n.name + "/scaled");
  w.node("Mul", {scores, w.scalar(n.name + "/scale", d.scale, t)}, {scaled}, n.name);
  if (d.causal) {
    const double low = t == DType::kFloat64 ? std::numeric_limits<double>::lowest()
                                            : static_cast<double>(std::numeric_limits<float>::lowest());
    std::vector<double> bias(static_cast<size_t>(d.tq * d.tk));
    for (int64_t i = 0; i < d.tq; ++i)
      for (int64_t j = 0; j < d.tk; ++j)
        bias[static_cast<size_t>(i * d.tk + j)] = j < d.allowed(i) ? 0.0 : low;
    NDArray b = nd::array(bias, Shape{d.tq, d.tk}).astype(t);
    std::string masked = w.fresh(n.name + "/masked");
    w.node("Add", {scaled, w.constant(n.name + "/causal_bias", b)}, {masked}, n.name);
    scaled = masked;
  }
  std::string probs = w.fresh(n.name + "/probs");
  attr(w.node("Softmax", {scaled}, {probs}, n.name), "axis", int64_t{-1});
  w.node("MatMul", {probs, w.in(n, 2)}, {w.out(n)}, n.name);
}

const std::map<OpId, WriteFn>& writers() {
  static const std::map<OpId, WriteFn> table{
      {OpId::kElemwiseAdd, binary<kAdd>},          {OpId::kElemwiseSub, binary<kSub>},
      {OpId::kElemwiseMul, binary<kMul>},          {OpId::kElemwiseDiv, binary<kDiv>},
      {OpId::kBroadcastAdd, binary<kAdd>},         {OpId::kBroadcastSub, binary<kSub>},
      {OpId::kBroadcastMul, binary<kMul>},         {OpId::kBroadcastDiv, binary<kDiv>},
      {OpId::kBroadcastPower, binary<kPow>},       {OpId::kBroadcastMaximum, binary<kMax>},
      {OpId::kBroadcastMinimum, binary<kMin>},     {OpId::kPlusScalar, with_scalar<kAdd>},
      {OpId::kMinusScalar, with_scalar<kSub>},     {OpId::kRMinusScalar, with_scalar<kSub, true>},
      {OpId::kMulScalar, with_scalar<kMul>},       {OpId::kDivScalar, with_scalar<kDiv>},
      {OpId::kRDivScalar, with_scalar<kDiv, true>}, {OpId::kPowerScalar, with_scalar<kPow>},
      {OpId::kMaximumScalar, with_scalar<kMax>},   {OpId::kMinimumScalar, with_scalar<kMin>},
      {OpId::kRelu, unary<kRelu>},                 {OpId::kSigmoid, unary<kSigmoid>},
      {OpId::kTanh, unary<kTanh>},                 {OpId::kExp, unary<kExp>},
      {OpId::kLog, unary<kLog>},                   {OpId::kSqrt, unary<kSqrt>},                 {OpId::kErf, unary<kErf>},
      {OpId::kAbs, unary<kAbs>},                   {OpId::kNegative, unary<kNeg>},
      {OpId::kSin, unary<kSin>},                   {OpId::kCos, unary<kCos>},
      {OpId::kTan, unary<kTan>},                   {OpId::kArcsin, unary<kAsin>},
      {OpId::kArccos, unary<kAcos>},               {OpId::kArctan, unary<kAtan>},
      {OpId::kSinh, unary<kSinh>},                 {OpId::kCosh, unary<kCosh>},
      {OpId::kArcsinh, unary<kAsinh>},             {OpId::kArccosh, unary<kAcosh>},
      {OpId::kArctanh, unary<kAtanh>},             {OpId::kRint, unary<kRound>},  // ONNX rounds halves to even
      {OpId::kCeil, unary<kCeil>},                 {OpId::kFloor, unary<kFloor>},
      {OpId::kSign, unary<kSign>},                 {OpId::kBroadcastMod, write_mod<0>},
      {OpId::kBroadcastFmod, write_mod<1>},
      {OpId::kCopy, unary<kIdentity>},             {OpId::kBlockGrad, unary<kIdentity>},
      {OpId::kClip, write_clip},                   {OpId::kActivation, write_activation},
      {OpId::kLeakyReLU, write_leaky_relu},        {OpId::kConvolution, write_convolution},
      {OpId::kPooling, write_pooling},             {OpId::kBatchNorm, write_batch_norm},
      {OpId::kFullyConnected, write_fully_connected}, {OpId::kDot, write_dot},
      {OpId::kReshape, write_reshape},             {OpId::kFlatten, write_flatten},
      {OpId::kTranspose, write_transpose},         {OpId::kConcat, write_concat},
      {OpId::kSoftmax, write_softmax},             {OpId::kLogSoftmax, write_log_softmax},
      {OpId::kDropout, write_dropout},             {OpId::kSum, write_sum},
      {OpId::kMean, write_mean},                   {OpId::kMax, write_max},
      {OpId::kAddN, write_add_n},                 {OpId::kEmbedding, write_embedding},
      {OpId::kLayerNorm, write_layer_norm},       {OpId::kSliceAxis, write_slice_axis},
      {OpId::kExpandDims, write_expand_dims},     {OpId::kSplit, write_split},
      {OpId::kBatchDot, write_batch_dot},
      {OpId::kAttention, write_attention},
  };
  return table;
}

}  // namespace

std::string to_onnx(const ir::Graph& g, const ArrayMap& values, const ExportOptions& options) {
  const int opset = options.opset;
  std::optional<int64_t> batch;
  std::vector<ir::NodeId> inputs = g.nodes_of_kind(ir::NodeKind::kInput);
  if (options.dynamic_batch) {
    KILN_CHECK(!inputs.empty() && g.node(inputs[0]).types[0].shape.ndim() > 0, ValueError,
               "ONNX export: a dynamic batch needs an input with a dim 0");
    batch = g.node(inputs[0]).types[0].shape[0];
  }
  const std::string batch_symbol = batch ? "N" : "";
  KILN_CHECK(opset >= 13 && opset <= kMaxOpset, ValueError, "ONNX export: opset {} is not in [13, {}]", opset, kMaxOpset);
  (void)mxnet::prefixed_params(g, values);  // ValueError listing the params `values` lacks
  Writer w(g, opset, options.input_names, batch);
  pb::ModelProto& m = w.model();
  m.set_ir_version(8);
  m.set_producer_name("kiln");
  m.set_producer_version(KILN_VERSION);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  w.graph().set_name("kiln");
  for (const ir::Node& n : g.nodes()) {
    switch (n.kind) {
      case ir::NodeKind::kInput: {
        KILN_CHECK(!batch || (n.types[0].shape.ndim() > 0 && n.types[0].shape[0] == *batch), NotSupported,
                   "ONNX export: input '{}' {} does not start with the batch ({}) of a dynamic batch", n.name,
                   n.types[0].shape, *batch);
        set_type(w.graph().add_input(), w.value({static_cast<ir::NodeId>(&n - g.nodes().data()), 0}), n.types[0],
                 batch_symbol);
        break;
      }
      case ir::NodeKind::kParam:
      case ir::NodeKind::kAux:
      case ir::NodeKind::kConst: w.initializer(n.name, values.at(n.name)); break;
      case ir::NodeKind::kOp: {
        auto fn = writers().find(n.op);
        if (fn == writers().end()) unsupported(n, "this op");
        fn->second(w, n);
        break;
      }
    }
  }
  for (const ir::Entry& e : g.outputs()) {
    std::string name = w.value(e);
    if (g.node(e.node).kind != ir::NodeKind::kOp) {  // an output that is an input or an initializer
      std::string copy = w.fresh(name + "/out");
      w.node("Identity", {name}, {copy}, name);
      name = copy;
    }
    KILN_CHECK(!batch || (g.type(e).shape.ndim() > 0 && g.type(e).shape[0] == *batch), NotSupported,
               "ONNX export: output '{}' {} does not start with the batch ({}) of a dynamic batch", name,
               g.type(e).shape, *batch);
    set_type(w.graph().add_output(), name, g.type(e), batch_symbol);
  }
  try {
    pb::checker::check_model(m);
    pb::shape_inference::InferShapes(m, pb::OpSchemaRegistry::Instance(), pb::ShapeInferenceOptions(true, 1, false));
  } catch (const std::exception& e) {
    throw InternalError(fmt::format("internal error: the exported ONNX model fails libonnx's checks: {}", e.what()));
  }
  m.mutable_graph()->clear_value_info();  // written by shape inference; readers infer their own
  return m.SerializeAsString();
}

void save_model(const std::string& path, const ir::Graph& g, const ArrayMap& values, const ExportOptions& options) {
  mxnet::write_text_file(path, to_onnx(g, values, options));
}

}  // namespace kiln::onnx
