// Trainer: applies an optimizer to a set of parameters, Gluon style.
//
//   Trainer trainer(net.collect_params(), optim::SGD({.lr = 0.1}));
//   { autograd::Record r; loss = loss_fn(net(X), y); }
//   autograd::backward({loss});
//   trainer.step(batch_size);   // gradients are rescaled by 1/batch_size
//
// `step` first sums each parameter's gradients over the devices it lives on
// through a KVStore (frontend/kvstore.h; one push_batch of every parameter,
// last first, then a pull each) into its primary copy's gradient
// (the copy on the key's home device), then updates that copy with one fused
// kernel and copies the new values to the other copies, so the copies stay
// equal. (Updating every copy with the summed gradient was measured slower:
// `kiln bench dp_update`.) `allreduce_grads` alone writes the sum into every
// copy's gradient. Everything is queued on the engine; step returns at once, and a
// parameter's reduction starts as soon as backward has written its gradients
// (later parameters, whose gradients backward writes first, get the higher
// priority). Parameters with grad_req null are skipped.
//
// kvstore: "auto" picks, for parameters on one device, none; on several
// devices that are all GPUs, "nccl" when NCCL can run here
// (kv::nccl_unavailable() is empty), else "device" (CPUs, GPUs or a mix).
// Launched by mpirun with several processes it picks "nccl" for GPU
// parameters (one GPU per process) when NCCL can run, else "dist_sync". Or
// name a type ("local", "device", ...), or "none" (no
// aggregation: each copy is updated with its own gradient, as Gluon does
// without a kvstore). The store is created at the first step, when the
// parameters' devices are known; with several processes (dist_sync) every
// process then takes rank 0's parameter values, and step's batch_size is the
// global batch (summed over the processes).
//
// Stale gradients: a copy whose gradient backward has not written since the
// previous step (its device got no shard of the batch, see split_and_load) is
// left out of the sum and receives the others' sum. A parameter with no fresh
// gradient on any device makes step throw ValueError naming every such
// parameter, before anything is queued, unless ignore_stale_grad is set (then
// those parameters are not updated).
//
// Gradient clipping: set_max_grad_norm(c) makes every update first scale the
// gradients it is about to apply so that their global L2 norm (after the
// 1/batch_size rescaling, over every updated parameter: the summed gradient
// of aggregated ones) is at most c (clip_global_norm.h); last_grad_norm()
// gives that norm before clipping. A non-finite norm throws ValueError before
// any weight or the step count changes. With several copies of a parameter
// and no aggregation (kvstore "none") clipping throws NotSupported: each copy
// would need its own norm.
#pragma once

#include <limits>
#include <memory>
#include <string>

#include "frontend/kvstore.h"
#include "frontend/nn/parameter.h"
#include "frontend/train/optimizer.h"

namespace kiln {

class Trainer {
 public:
  Trainer(nn::ParameterDict params, std::shared_ptr<optim::Optimizer> optimizer, std::string kvstore = "auto");
  template <typename O, typename = std::enable_if_t<std::is_base_of_v<optim::Optimizer, O>>>
  Trainer(nn::ParameterDict params, O optimizer, std::string kvstore = "auto")
      : Trainer(std::move(params), std::make_shared<O>(std::move(optimizer)), std::move(kvstore)) {}

  void step(int64_t batch_size, bool ignore_stale_grad = false);
  // The two halves of step, for users who modify gradients in between.
  void allreduce_grads(bool ignore_stale_grad = false);
  void update(int64_t batch_size, bool ignore_stale_grad = false);

  // The factor the loss was multiplied by before backward (a LossScaler's):
  // update divides the gradients by it as well as by the batch size. 1 by default.
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  double loss_scale() const { return loss_scale_; }
  // After allreduce_grads: drop the reduced gradients without updating (a
  // skipped step: parameters and optimizer state stay as they are).
  void discard_grads() { have_fresh_ = false; }

  // The store in use: null before the first step and for "none".
  kv::KVStore* kvstore() const { return kvstore_.get(); }

  optim::Optimizer& optimizer() { return *optimizer_; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  double learning_rate() const { return optimizer_->learning_rate(); }
  void set_learning_rate(double lr) { optimizer_->set_learning_rate(lr); }
  const nn::ParameterDict& params() const { return params_; }

  // max_norm > 0 turns global-norm clipping on, 0 off (ValueError below 0).
  void set_max_grad_norm(double max_norm);
  double max_grad_norm() const { return max_grad_norm_; }
  // The gradients' global norm at the last update (NaN before one, or when clipping is off).
  double last_grad_norm() const { return last_grad_norm_; }

  void save_states(const std::string& path) const { optimizer_->save_states(path); }
  void load_states(const std::string& path) { optimizer_->load_states(path); }

 private:
  // Data parallelism: the store and which copies hold fresh gradients.
  void init_kvstore();
  // Sums the fresh gradients into the primary copy (to_every_copy: into all).
  void reduce_grads(bool ignore_stale_grad, bool to_every_copy);
  // Per parameter (in params_ order), the indices of its fresh copies; throws
  // for parameters without any unless ignore_stale_grad. Clears the flags.
  std::vector<std::vector<size_t>> take_fresh(bool ignore_stale_grad);

  nn::ParameterDict params_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::string kvstore_type_;
  bool kvstore_ready_ = false;
  std::unique_ptr<kv::KVStore> kvstore_;
  std::vector<std::vector<size_t>> fresh_;  // from allreduce_grads, for update
  bool have_fresh_ = false;
  std::vector<size_t> primary_;  // per parameter: the copy that holds the sum and is updated
  double loss_scale_ = 1;
  double max_grad_norm_ = 0;
  double last_grad_norm_ = std::numeric_limits<double>::quiet_NaN();
  // Clips the gradients update() is about to apply (max_grad_norm_ > 0).
  void clip_grads(double rescale);
};

}  // namespace kiln
