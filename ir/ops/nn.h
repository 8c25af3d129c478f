// Attributes of the nn family: FullyConnected, Activation, LeakyReLU, Dropout,
// Flatten, softmax, log_softmax, pick, _kiln_softmax_cross_entropy, add_n and
// their fused backward ops. Names and defaults are MXNet's, so exported
// graphs round-trip.
//
//   auto fc = OpAttrs::make(FullyConnectedAttrs{.num_hidden = 10});
//   NDArray y = invoke1(OpId::kFullyConnected, {x, w, b}, fc);           // x [N, ...] -> [N, 10]
//   NDArray a = invoke1(OpId::kActivation, {y}, OpAttrs::make(ActivationAttrs{ActType::kRelu}));
//   NDArray p = invoke1(OpId::kSoftmax, {a}, OpAttrs::make(SoftmaxAttrs{.axis = -1}));
//
// Semantics (inference in ir/ops/nn.cc, kernels in backends/cpu/nn_*.cc):
//   - FullyConnected(data, weight[, bias]): flatten: data [N, d1, ...] is
//     [N, K] with K = d1*...; else the last axis is K and the others stay.
//     weight [num_hidden, K], bias [num_hidden] (absent when no_bias).
//     out = data . weight^T + bias. float32 (oneDNN) and float64.
//   - Activation: relu, sigmoid, tanh, softrelu = log(1 + e^x), softsign =
//     x / (1 + |x|). _backward_Activation(out_grad, output) computes the
//     derivative from the forward *output* (so the input need not be kept).
//   - LeakyReLU: leaky x<0 ? slope*x : x; elu x<0 ? slope*(e^x - 1) : x;
//     selu (fixed alpha and lambda, slope ignored); gelu 0.5 x (1 + erf(x/√2));
//     gelu_tanh 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))) (ir/ops/gelu_tanh.h).
//     prelu(data, gamma): x<0 ? gamma[c]*x : x, gamma one slope per channel c (axis 1)
//     or a single one. rrelu throws NotSupported. _backward_LeakyReLU(out_grad, data).
//   - Dropout(data) -> (out, mask): in train mode (or mode "always") each
//     mask element is 1/(1-p) with probability 1-p and 0 otherwise; out =
//     data * mask (mask broadcast along `axes`, which have length 1 in the
//     mask). Otherwise out = data and mask = 1. The mask comes from a
//     counter-based generator at stream position offset + i under `seed`,
//     so it does not depend on thread count or scheduling.
//   - softmax/log_softmax along `axis`, of data / temperature (softmax with
//     use_length: over each row's first length elements); the backward ops
//     take (out_grad, forward output).
//   - pick(data, index): data's elements along `axis` at index (any numeric
//     dtype, truncated toward zero); index is data's shape without `axis`
//     (or with it at length 1). Out-of-range indices: clip, wrap, or raise
//     (IndexError at the next read). _backward_pick(out_grad, index) scatters
//     into zeros of `data_shape`.
//   - _kiln_softmax_cross_entropy(data [N, C], label [N]) -> loss [N] =
//     logsumexp(data[i]) - data[i, label[i]]; labels in any numeric dtype. A
//     label outside [0, C) makes the kernel throw ValueError naming the label,
//     its position and C (rethrown at the next read of the loss).
//   - add_n(a_1 .. a_num_args): elementwise sum of same-shape arrays.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ir/attrs.h"
#include "ir/ops/matrix.h"

namespace kiln {

// ---- enum attribute values (codecs found by ADL from ir/attrs.h)

enum class ActType : int8_t { kRelu, kSigmoid, kTanh, kSoftrelu, kSoftsign };
ActType parse_attr(std::string_view s, ActType*);  // "relu" | "sigmoid" | "tanh" | "softrelu" | "softsign"
std::string print_attr(ActType v);

enum class LeakyType : int8_t { kLeaky, kElu, kSelu, kGelu, kPrelu, kRrelu, kGeluTanh };
// "leaky" | "elu" | "selu" | "gelu" (or "gelu_erf") | "prelu" | "rrelu" | "gelu_tanh"
LeakyType parse_attr(std::string_view s, LeakyType*);
std::string print_attr(LeakyType v);

enum class DropoutMode : int8_t { kTraining, kAlways };
DropoutMode parse_attr(std::string_view s, DropoutMode*);  // "training" | "always"
std::string print_attr(DropoutMode v);

// ---- attribute structs, one per op (MXNet names and defaults)

// FullyConnected. The input count is 3, or 2 when no_bias.
struct FullyConnectedAttrs {
  int64_t num_hidden = 0;
  bool no_bias = false;
  bool flatten = true;
  template <typename V>
  void fields(V& v) {
    v("num_hidden", num_hidden, kRequired);
    v("no_bias", no_bias);
    v("flatten", flatten);
  }
};

// Activation and _backward_Activation.
struct ActivationAttrs {
  ActType act_type = ActType::kRelu;
  template <typename V>
  void fields(V& v) {
    v("act_type", act_type, kRequired);
  }
};

// LeakyReLU and _backward_LeakyReLU. lower_bound/upper_bound are rrelu's and
// only accepted.
struct LeakyReLUAttrs {
  LeakyType act_type = LeakyType::kLeaky;
  double slope = 0.25;
  double lower_bound = 0.125;
  double upper_bound = 0.334;
  template <typename V>
  void fields(V& v) {
    v("act_type", act_type);
    v("slope", slope);
    v("lower_bound", lower_bound);
    v("upper_bound", upper_bound);
  }
};

// Dropout. `seed` and `offset` are Kiln's (not MXNet's): the mask's position
// in the counter-based stream, drawn by nd::dropout at the call. They are
// printed when not 0, so an exported graph carries them; MXNet would reject
// them, and a loader that reads them back reuses one fixed mask per call site
// unless it draws new values.
struct DropoutAttrs {
  double p = 0.5;
  DropoutMode mode = DropoutMode::kTraining;
  IntTuple axes;
  std::optional<bool> cudnn_off = false;
  int64_t seed = 0;
  int64_t offset = 0;
  template <typename V>
  void fields(V& v) {
    v("p", p);
    v("mode", mode);
    v("axes", axes);
    v("cudnn_off", cudnn_off);
    v("seed", seed);
    v("offset", offset);
  }
};

// softmax, log_softmax and their backward ops. `dtype` (the output dtype)
// must be None or the input's. use_length (softmax only): a second input
// `length`, shaped as data without `axis`, any numeric dtype; each row
// normalizes its first length elements (clamped to [0, n]) and is 0 after
// them, so _backward_softmax, which reads the output, needs no length.
struct SoftmaxAttrs {
  int axis = -1;
  std::optional<double> temperature;
  std::optional<DType> dtype;
  std::optional<bool> use_length = false;
  template <typename V>
  void fields(V& v) {
    v("axis", axis);
    v("temperature", temperature);
    v("dtype", dtype);
    v("use_length", use_length);
  }
};

// pick. axis None (pick from the flattened array) is not supported.
struct PickAttrs {
  std::optional<int> axis = -1;
  bool keepdims = false;
  TakeMode mode = TakeMode::kClip;
  template <typename V>
  void fields(V& v) {
    v("axis", axis);
    v("keepdims", keepdims);
    v("mode", mode);
  }
};

// _backward_pick: pick's attributes plus the forward data's shape.
struct PickBackwardAttrs {
  std::optional<int> axis = -1;
  bool keepdims = false;
  TakeMode mode = TakeMode::kClip;
  Shape data_shape;
  template <typename V>
  void fields(V& v) {
    v("axis", axis);
    v("keepdims", keepdims);
    v("mode", mode);
    v("data_shape", data_shape, kRequired);
  }
};

// add_n (alias ElementWiseSum).
struct AddNAttrs {
  int num_args = 1;
  template <typename V>
  void fields(V& v) {
    v("num_args", num_args, kRequired);
  }
};

// ---- shape rules shared by inference and kernels

// FullyConnected's operands as a matrix product: out [m, n] = data [m, k] . weight[n, k]^T.
struct FullyConnectedDims {
  int64_t m = 0, k = 0, n = 0;
  Shape out;
};
// Throws ShapeError naming the shapes when data, weight or bias do not fit.
FullyConnectedDims fully_connected_dims(const Shape& data, const Shape& weight, const FullyConnectedAttrs& attrs);

// An axis reduction seen as [outer, n, inner] (n the length of `axis`).
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at_axis(const Shape& s, int axis);  // axis already normalized

// pick's output shape; throws for shapes that do not fit (index included).
Shape pick_out_shape(const Shape& data, int axis, bool keepdims);

// SELU's constants (Klambauer et al.), as MXNet uses them.
// Embedding(data, weight): rows of weight [input_dim, output_dim] picked by
// the token ids in data (any index dtype, truncated to integers); out is
// data's shape + [output_dim]. sparse_grad is accepted and ignored (the
// weight's gradient is dense).
struct EmbeddingAttrs {
  int64_t input_dim = 0;
  int64_t output_dim = 0;
  DType dtype = DType::kFloat32;
  bool sparse_grad = false;
  template <typename V>
  void fields(V& v) {
    v("input_dim", input_dim, kRequired);
    v("output_dim", output_dim, kRequired);
    v("dtype", dtype);
    v("sparse_grad", sparse_grad);
  }
};

// The one check of an Embedding token id, for every backend's kernel:
// IndexError naming the id, its position in data and the vocabulary size.
void check_embedding_id(int64_t id, size_t position, int64_t input_dim);

inline constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
inline constexpr double kSeluLambda = 1.0507009873554804934193349852946;

}  // namespace kiln
