// nd functions of the nn family: dense layers, activations, dropout,
// softmax, pick, the fused softmax cross-entropy and add_n. Each is one call
// to `invoke`; ir/ops/nn.h has the exact semantics.
//
//   NDArray h = nd::fully_connected(x, w, b, 128);           // x [N, ...] -> [N, 128]
//   h = nd::activation(h, ActType::kRelu);
//   h = nd::dropout(h, 0.5);                                 // identity unless in train mode
//   NDArray logits = nd::fully_connected(h, w2, b2, 10);
//   NDArray loss = nd::softmax_cross_entropy(logits, labels); // [N]
//   NDArray p = nd::softmax(logits);                          // along the last axis
//
// Errors (at the call, nothing queued): ShapeError/TypeError naming the op
// and the input types. A label outside [0, classes) is found by the kernel:
// the ValueError (naming the label, its position and the class count) is
// rethrown at the next read of the loss.
//
// Dropout masks come from a per-device counter-based stream (see
// dropout_seed): the mask of each call depends only on the seed and on how
// many dropout elements were drawn on that device before it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "frontend/ndarray.h"
#include "ir/ops/nn.h"

namespace kiln::nd {

// x . w^T + b with w [num_hidden, K]; `b` none means no bias. flatten: x
// [N, d1, ...] is [N, d1*...]; else the last axis of x is K.
NDArray fully_connected(const NDArray& x, const NDArray& w, const NDArray& b, int64_t num_hidden, bool flatten = true);
// relu, sigmoid, tanh, softrelu or softsign.
NDArray activation(const NDArray& x, ActType act_type);
// leaky (slope * x below 0), elu (slope * (e^x - 1) below 0), selu, gelu (the
// erf form), gelu_tanh (the tanh approximation).
NDArray leaky_relu(const NDArray& x, LeakyType act_type = LeakyType::kLeaky, double slope = 0.25);
// x * mask, mask 1/(1-p) with probability 1-p, else 0; shared along `axes`.
// Applies in train mode (autograd::is_training()) or with mode kAlways;
// otherwise returns x's values unchanged.
NDArray dropout(const NDArray& x, double p = 0.5, const IntTuple& axes = {}, DropoutMode mode = DropoutMode::kTraining);
// [d0, d1, ...] -> [d0, d1*...].
NDArray flatten(const NDArray& x);
// exp(x / temperature) normalized along `axis`.
NDArray softmax(const NDArray& x, int axis = -1, std::optional<double> temperature = std::nullopt);
// softmax over the first length[row] elements of each row along `axis`
// (MXNet's use_length), 0 after them; length has x's shape without `axis`,
// any numeric dtype, values clamped to [0, n] (a row of length 0 is all 0).
NDArray softmax(const NDArray& x, const NDArray& length, int axis = -1,
                std::optional<double> temperature = std::nullopt);
// log(softmax(x / temperature)) along `axis`, computed stably.
NDArray log_softmax(const NDArray& x, int axis = -1, std::optional<double> temperature = std::nullopt);
// x's elements along `axis` at `index` (x's shape without that axis).
NDArray pick(const NDArray& x, const NDArray& index, int axis = -1, bool keepdims = false,
             TakeMode mode = TakeMode::kClip);
// Per-row loss logsumexp(logits[i]) - logits[i, labels[i]] for logits [N, C] and labels [N].
NDArray softmax_cross_entropy(const NDArray& logits, const NDArray& labels);
// Elementwise sum of same-shape arrays (at least one).
NDArray add_n(std::span<const NDArray> arrays);
// Rows of weight [input_dim, output_dim] picked by the token ids in data:
// data's shape + [output_dim]. An id outside [0, input_dim) is an IndexError
// naming it (raised where the kernel runs: at the next wait on the result).
NDArray embedding(const NDArray& data, const NDArray& weight);
inline NDArray add_n(const std::vector<NDArray>& arrays) { return add_n(std::span<const NDArray>(arrays)); }

// Restarts every device's dropout stream from `seed` (default 0 until called).
// Not yet tied to nd::random::seed: call both for a reproducible run.
void dropout_seed(uint64_t seed);

// The dropout streams' whole state, for checkpoints: the seed and, per
// device, how many mask elements were drawn (sorted by device).
struct DropoutState {
  uint64_t seed = 0;
  std::vector<std::pair<Device, int64_t>> drawn;
};
DropoutState dropout_state();
void set_dropout_state(const DropoutState& state);

// For executors of traced graphs: Dropout's attributes `attrs` with the
// stream position of a new mask for input shape `x` on `device` (drawn as
// nd::dropout draws it; unchanged when no mask is made: p == 0, or predict
// mode and mode "training").
OpAttrs dropout_attrs_for_call(const OpAttrs& attrs, const Shape& x, Device device, bool is_train);

}  // namespace kiln::nd
