// Imperative automatic differentiation (Gluon's autograd).
//
//   x.attach_grad();                       // x.grad() is a zero buffer from now on
//   {
//     autograd::Record record;             // record (and train mode) in this scope
//     y = nd::sum(x * x);
//   }
//   autograd::backward({y});               // queued; x.grad() == 2 * x once it runs
//
// While recording, every invoke of a differentiable op whose inputs need a
// gradient appends a node to the tape (the node is owned by the outputs'
// handles: dropping every output drops the tape behind it). `backward` walks
// the tape from the heads in reverse topological order and applies each op's
// GradFn (ir/grad.h) through invoke, so the backward pass runs on the engine,
// asynchronously, like any other work. Gradients reach leaf arrays according
// to their GradReq: kWrite overwrites the buffer, kAdd accumulates into it in
// place, kNull ignores it. A leaf's buffer is written as soon as the walk has
// taken every edge into it (right behind the op that produced its gradient),
// so work that reads it (a KVStore reduction, an optimizer step) can start
// while the rest of the backward pass runs.
//
// Thread safety: the recording/training flags are per thread (as in MXNet).
// A tape must be used from one thread at a time.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "frontend/ndarray.h"

namespace kiln::autograd {

bool is_recording();
bool is_training();
// Set the flags; return the previous value.
bool set_recording(bool on);
bool set_training(bool on);

// Records in this scope (and sets train mode unless told otherwise).
class Record {
 public:
  explicit Record(bool train_mode = true);
  ~Record();
  Record(const Record&) = delete;
  Record& operator=(const Record&) = delete;

 private:
  bool prev_recording_, prev_training_;
};

// Stops recording in this scope (predict mode unless told otherwise).
class Pause {
 public:
  explicit Pause(bool train_mode = false);
  ~Pause();
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;

 private:
  bool prev_recording_, prev_training_;
};

// Train/predict mode without changing recording.
class TrainMode {
 public:
  TrainMode();
  ~TrainMode();

 private:
  bool prev_;
};
class PredictMode {
 public:
  PredictMode();
  ~PredictMode();

 private:
  bool prev_;
};

struct BackwardOptions {
  bool retain_graph = false;  // keep the tape for another backward
  bool train_mode = true;     // mode the backward ops run in
};

// Accumulates d(heads)/d(leaf) into every reachable leaf's grad buffer.
// `head_grads` default to ones. Throws ValueError if a head is not on a tape.
void backward(std::span<const NDArray> heads, std::span<const NDArray> head_grads = {},
              const BackwardOptions& options = {});
inline void backward(std::initializer_list<NDArray> heads, const BackwardOptions& options = {}) {
  backward(std::span<const NDArray>(heads.begin(), heads.size()), {}, options);
}

// Returns d(heads)/d(variables) as new arrays, without touching grad buffers.
// With `create_graph`, the returned gradients are themselves recorded
// (higher-order gradients).
std::vector<NDArray> grad(std::span<const NDArray> heads, std::span<const NDArray> variables,
                          std::span<const NDArray> head_grads = {}, bool retain_graph = false,
                          bool create_graph = false);

}  // namespace kiln::autograd
