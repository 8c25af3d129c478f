// Trainer: applies an optimizer to a set of parameters, Gluon style.
//
//   Trainer trainer(net.collect_params(), optim::SGD({.lr = 0.1}));
//   { autograd::Record r; loss = loss_fn(net(X), y); }
//   autograd::backward({loss});
//   trainer.step(batch_size);   // gradients are rescaled by 1/batch_size
//
// `step` first aggregates each parameter's gradients over the devices it
// lives on (sum, then every copy receives the sum), then updates every copy
// with one fused kernel per copy. Everything is queued on the engine; step
// returns at once. Parameters with grad_req null are skipped.
// (The data-parallel issue replaces the aggregation with a KVStore.)
#pragma once

#include <memory>
#include <string>

#include "frontend/nn/parameter.h"
#include "frontend/train/optimizer.h"

namespace kiln {

class Trainer {
 public:
  Trainer(nn::ParameterDict params, std::shared_ptr<optim::Optimizer> optimizer);
  template <typename O, typename = std::enable_if_t<std::is_base_of_v<optim::Optimizer, O>>>
  Trainer(nn::ParameterDict params, O optimizer)
      : Trainer(std::move(params), std::make_shared<O>(std::move(optimizer))) {}

  void step(int64_t batch_size);
  // The two halves of step, for users who modify gradients in between.
  void allreduce_grads();
  void update(int64_t batch_size);

  optim::Optimizer& optimizer() { return *optimizer_; }
  double learning_rate() const { return optimizer_->learning_rate(); }
  void set_learning_rate(double lr) { optimizer_->set_learning_rate(lr); }
  const nn::ParameterDict& params() const { return params_; }

  void save_states(const std::string& path) const { optimizer_->save_states(path); }
  void load_states(const std::string& path) { optimizer_->load_states(path); }

 private:
  nn::ParameterDict params_;
  std::shared_ptr<optim::Optimizer> optimizer_;
};

}  // namespace kiln
