#include "frontend/nd_nn.h"

#include <algorithm>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "frontend/autograd.h"
#include "frontend/invoke.h"

namespace kiln::nd {

NDArray fully_connected(const NDArray& x, const NDArray& w, const NDArray& b, int64_t num_hidden, bool flatten) {
  FullyConnectedAttrs a{.num_hidden = num_hidden, .no_bias = b.is_none(), .flatten = flatten};
  if (b.is_none()) return invoke1(OpId::kFullyConnected, {x, w}, OpAttrs::make(a));
  return invoke1(OpId::kFullyConnected, {x, w, b}, OpAttrs::make(a));
}

NDArray embedding(const NDArray& data, const NDArray& weight) {
  KILN_CHECK(weight.ndim() == 2, ShapeError, "embedding: weight must be [input_dim, output_dim], got {}", weight.shape());
  EmbeddingAttrs a{.input_dim = weight.shape()[0], .output_dim = weight.shape()[1], .dtype = weight.dtype()};
  return invoke1(OpId::kEmbedding, {data, weight}, OpAttrs::make(a));
}

NDArray activation(const NDArray& x, ActType act_type) {
  return invoke1(OpId::kActivation, {x}, OpAttrs::make(ActivationAttrs{act_type}));
}

NDArray leaky_relu(const NDArray& x, LeakyType act_type, double slope) {
  return invoke1(OpId::kLeakyReLU, {x}, OpAttrs::make(LeakyReLUAttrs{.act_type = act_type, .slope = slope}));
}

namespace {

// Per-device dropout streams: the seed and how many mask elements were drawn.
// Advanced at the call, so masks do not depend on scheduling.
struct DropoutStreams {
  std::mutex mu;
  uint64_t seed = 0;
  std::unordered_map<Device, int64_t> drawn;

  std::pair<int64_t, int64_t> next(Device d, int64_t n) {
    std::lock_guard lock(mu);
    int64_t& offset = drawn[d];
    int64_t start = offset;
    offset += n;
    // Distinct from nd::random's streams for the same seed and device.
    uint64_t s = (seed ^ 0xd1b54a32d192ed03ull) * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(d.kind) * 1000003u +
                 static_cast<uint64_t>(d.id);
    return {static_cast<int64_t>(s), start};
  }
};

DropoutStreams& dropout_streams() {
  static DropoutStreams s;
  return s;
}

}  // namespace

void dropout_seed(uint64_t seed) {
  auto& st = dropout_streams();
  std::lock_guard lock(st.mu);
  st.seed = seed;
  st.drawn.clear();
}

DropoutState dropout_state() {
  auto& st = dropout_streams();
  std::lock_guard lock(st.mu);
  DropoutState out{.seed = st.seed, .drawn = {st.drawn.begin(), st.drawn.end()}};
  std::sort(out.drawn.begin(), out.drawn.end(), [](const auto& a, const auto& b) {
    return std::pair(a.first.kind, a.first.id) < std::pair(b.first.kind, b.first.id);
  });
  return out;
}

void set_dropout_state(const DropoutState& state) {
  auto& st = dropout_streams();
  std::lock_guard lock(st.mu);
  st.seed = state.seed;
  st.drawn = {state.drawn.begin(), state.drawn.end()};
}

namespace {

// Draws a mask's stream position when a mask will be made; the mask's size is
// x's with `axes` at 1.
void draw_mask(DropoutAttrs& a, const Shape& x, Device device, bool is_train) {
  if (!(a.p > 0 && (a.mode == DropoutMode::kAlways || is_train))) return;
  int64_t n = x.size();
  for (int64_t axis : a.axes) {
    int ax = static_cast<int>(axis < 0 ? axis + x.ndim() : axis);
    if (ax >= 0 && ax < x.ndim() && x[ax] > 0) n /= x[ax];
  }
  std::tie(a.seed, a.offset) = dropout_streams().next(device, n);
}

}  // namespace

NDArray dropout(const NDArray& x, double p, const IntTuple& axes, DropoutMode mode) {
  DropoutAttrs a{.p = p, .mode = mode, .axes = axes};
  if (!x.is_none()) draw_mask(a, x.shape(), x.device(), autograd::is_training());
  return invoke(OpId::kDropout, {x}, OpAttrs::make(a))[0];
}

OpAttrs dropout_attrs_for_call(const OpAttrs& attrs, const Shape& x, Device device, bool is_train) {
  DropoutAttrs a = attrs.as<DropoutAttrs>();
  draw_mask(a, x, device, is_train);
  return OpAttrs::make(a);
}

NDArray flatten(const NDArray& x) { return invoke1(OpId::kFlatten, {x}); }

NDArray softmax(const NDArray& x, int axis, std::optional<double> temperature) {
  return invoke1(OpId::kSoftmax, {x}, OpAttrs::make(SoftmaxAttrs{.axis = axis, .temperature = temperature}));
}

NDArray softmax(const NDArray& x, const NDArray& length, int axis, std::optional<double> temperature) {
  return invoke1(OpId::kSoftmax, {x, length},
                 OpAttrs::make(SoftmaxAttrs{.axis = axis, .temperature = temperature, .use_length = true}));
}

NDArray log_softmax(const NDArray& x, int axis, std::optional<double> temperature) {
  return invoke1(OpId::kLogSoftmax, {x}, OpAttrs::make(SoftmaxAttrs{.axis = axis, .temperature = temperature}));
}

NDArray pick(const NDArray& x, const NDArray& index, int axis, bool keepdims, TakeMode mode) {
  return invoke1(OpId::kPick, {x, index}, OpAttrs::make(PickAttrs{.axis = axis, .keepdims = keepdims, .mode = mode}));
}

NDArray softmax_cross_entropy(const NDArray& logits, const NDArray& labels) {
  return invoke1(OpId::kSoftmaxCrossEntropy, {logits, labels});
}

NDArray add_n(std::span<const NDArray> arrays) {
  KILN_CHECK(!arrays.empty(), ValueError, "add_n: expected at least one array");
  return invoke1(OpId::kAddN, arrays, OpAttrs::make(AddNAttrs{static_cast<int>(arrays.size())}));
}

}  // namespace kiln::nd
