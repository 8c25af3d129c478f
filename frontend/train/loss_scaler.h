// Dynamic loss scaling for float16 training (PyTorch's GradScaler, MXNet's
// amp.init_trainer): float16 gradients underflow to zero below 6e-8, so the
// loss is multiplied by a large scale before backward and the gradients are
// divided by it again in the update.
//
//   amp::LossScaler scaler;                       // scale 65536
//   { amp::Autocast a(DType::kFloat16); autograd::Record r; loss = loss_fn(net(x), y); }
//   autograd::backward({scaler.scale_loss(loss)});
//   scaler.step(trainer, batch_size);             // or skips the step on inf/nan
//
// step sums the gradients over devices (Trainer::allreduce_grads) and checks
// them for inf and nan (one reduction over every gradient, read on the host:
// a synchronization per step). Finite: the Trainer updates with the scale
// divided out, and after `growth_interval` finite steps in a row the scale
// grows by `growth_factor`. Not finite: the step is skipped -- parameters and
// optimizer state stay bit-identical -- and the scale shrinks by
// `backoff_factor`. bfloat16 has float32's range and needs no scaler.
#pragma once

#include <cstdint>

#include "frontend/ndarray.h"
#include "frontend/train/trainer.h"

namespace kiln::amp {

struct LossScalerOptions {
  double init_scale = 65536;
  double growth_factor = 2;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  double scale() const { return scale_; }
  // loss * scale(), recorded on the loss's tape (inside autograd::Record or not).
  NDArray scale_loss(const NDArray& loss) const;
  // Returns whether the update ran (false: skipped for inf/nan gradients).
  bool step(Trainer& trainer, int64_t batch_size, bool ignore_stale_grad = false);

  int64_t skipped_steps() const { return skipped_; }
  // For checkpoints: the scale and the clean steps counted toward growth.
  struct State {
    double scale = 0;
    int64_t clean_steps = 0;
    int64_t skipped = 0;
  };
  State state() const { return {scale_, clean_steps_, skipped_}; }
  void set_state(const State& s);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t clean_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace kiln::amp
