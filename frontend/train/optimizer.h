// Optimizers: how a gradient changes a weight. Each update is one fused
// kernel per parameter copy (ops of ir/ops/optimizer.h), queued on the engine.
//
//   optim::SGD sgd({.lr = 0.1, .momentum = 0.9, .wd = 1e-4});
//   sgd.set_schedule([](int64_t step) { return step < 1000 ? 0.1 : 0.01; });
//   sgd.begin_step();                         // once per Trainer::step
//   sgd.update(key, weight, grad, 1.0 / 256);  // state is created on first use
//
// State (momentum, Adam's moments) is kept per `key` (the Trainer gives each
// parameter copy its own key) and can be saved and loaded for checkpoints.
// Not thread safe: one Trainer drives one optimizer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/ndarray.h"
#include "frontend/formats/mxnet/params_io.h"

namespace kiln::optim {

// Learning rate as a function of the number of steps taken so far.
using Schedule = std::function<double(int64_t step)>;

class Optimizer {
 public:
  explicit Optimizer(double lr) : lr_(lr) {}
  virtual ~Optimizer() = default;

  // Advances the step counter the schedule reads.
  void begin_step() { ++num_update_; }
  // weight -= f(grad * rescale_grad, state), in place.
  void update(int64_t key, const NDArray& weight, const NDArray& grad, double rescale_grad);

  double learning_rate() const;  // the schedule's value if one is set
  void set_learning_rate(double lr);
  void set_schedule(Schedule schedule) { schedule_ = std::move(schedule); }
  bool has_schedule() const { return static_cast<bool>(schedule_); }
  int64_t num_update() const { return num_update_; }
  virtual std::string name() const = 0;

  // Writes/reads every state array, per-key update counts and the step
  // counter (MXNet's NDArray-list format, atomically). Loading checks that the
  // saved optimizer type and state shapes match.
  void save_states(const std::string& path) const;
  void load_states(const std::string& path, Device device = Device::cpu(0));
  // The same in memory (checkpoints): the arrays save_states writes, and
  // their loading; `source` names them in errors. A loaded state moves to its
  // weight's device at the key's next update, which checks its shape.
  NamedArrays state_arrays() const;
  void load_state_arrays(const NamedArrays& arrays, std::string_view source, Device device = Device::cpu(0));

 protected:
  virtual std::vector<NDArray> create_state(const NDArray& weight) const = 0;
  // `t` counts this key's updates from 1 (Adam's bias correction).
  virtual void apply(const NDArray& weight, const NDArray& grad, std::vector<NDArray>& state, double lr,
                     double rescale_grad, int64_t t) = 0;

 private:
  struct KeyState {
    std::vector<NDArray> arrays;
    int64_t count = 0;
  };
  double lr_;
  Schedule schedule_;
  int64_t num_update_ = 0;
  std::map<int64_t, KeyState> states_;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double wd = 0;
  bool nesterov = false;
  double clip_gradient = -1;  // off when negative
};

class SGD final : public Optimizer {
 public:
  explicit SGD(SGDOptions options = {}) : Optimizer(options.lr), o_(options) {}
  std::string name() const override { return o_.nesterov ? "nag" : "sgd"; }

 protected:
  std::vector<NDArray> create_state(const NDArray& weight) const override;
  void apply(const NDArray& weight, const NDArray& grad, std::vector<NDArray>& state, double lr,
             double rescale_grad, int64_t t) override;

 private:
  SGDOptions o_;
};

struct AdamOptions {
  double lr = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double wd = 0;
  double clip_gradient = -1;
};

// Adam with bias correction folded into the step size, as MXNet does.
class Adam final : public Optimizer {
 public:
  explicit Adam(AdamOptions options = {}) : Optimizer(options.lr), o_(options) {}
  std::string name() const override { return "adam"; }

 protected:
  std::vector<NDArray> create_state(const NDArray& weight) const override;
  void apply(const NDArray& weight, const NDArray& grad, std::vector<NDArray>& state, double lr,
             double rescale_grad, int64_t t) override;

 private:
  AdamOptions o_;
};

struct AdamWOptions {
  double lr = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double wd = 0.01;
  double clip_gradient = -1;
  bool correct_bias = true;
};

// Adam with decoupled weight decay (Loshchilov and Hutter), as PyTorch's
// AdamW and Gluon-NLP's BERTAdam: at step t, with g = clip(rescale * grad),
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2,
//   w = w - lr * (m_hat / (sqrt(v_hat) + epsilon) + wd * w),
// m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t) (m and v themselves
// when correct_bias is off). One adamw_update per parameter; the decay is
// never added to the gradient, so the moments see the loss's gradient only.
// State: m and v per key (saved with state_arrays, as Adam's).
class AdamW final : public Optimizer {
 public:
  explicit AdamW(AdamWOptions options = {}) : Optimizer(options.lr), o_(options) {}
  std::string name() const override { return "adamw"; }

 protected:
  std::vector<NDArray> create_state(const NDArray& weight) const override;
  void apply(const NDArray& weight, const NDArray& grad, std::vector<NDArray>& state, double lr, double rescale_grad,
             int64_t t) override;

 private:
  AdamWOptions o_;
};

}  // namespace kiln::optim
