#include "frontend/train/loss_scaler.h"

#include <cmath>

#include "frontend/autograd.h"
#include "frontend/nd.h"

namespace kiln::amp {

LossScaler::LossScaler(LossScalerOptions options) : options_(options), scale_(options.init_scale) {
  KILN_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale), ValueError,
             "LossScaler: init_scale must be positive and finite, got {}", options.init_scale);
  KILN_CHECK(options.growth_factor >= 1 && options.backoff_factor > 0 && options.backoff_factor < 1, ValueError,
             "LossScaler: growth_factor must be >= 1 and backoff_factor in (0, 1), got {} and {}",
             options.growth_factor, options.backoff_factor);
  KILN_CHECK(options.growth_interval >= 1, ValueError, "LossScaler: growth_interval must be >= 1, got {}",
             options.growth_interval);
}

NDArray LossScaler::scale_loss(const NDArray& loss) const {
  autograd::Record record(autograd::is_training());  // on the loss's tape, recorded or not around the call
  return loss * scale_;
}

bool LossScaler::step(Trainer& trainer, int64_t batch_size, bool ignore_stale_grad) {
  trainer.allreduce_grads(ignore_stale_grad);
  // sum(|g|) over every gradient is inf or nan exactly when some element is.
  NDArray total;
  for (const auto& [name, p] : trainer.params()) {
    if (p.grad_req() == GradReq::kNull) continue;
    for (const NDArray& g : p.list_grad()) {
      NDArray s = nd::sum(nd::abs(g.dtype() == DType::kFloat32 ? g : g.astype(DType::kFloat32)));
      if (s.device() != Device::cpu(0)) s = s.copy_to(Device::cpu(0));
      total = total.is_none() ? s : total + s;
    }
  }
  const bool finite = total.is_none() || std::isfinite(total.item<double>());
  if (!finite) {
    trainer.discard_grads();
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
    ++skipped_;
    return false;
  }
  trainer.set_loss_scale(scale_);
  trainer.update(batch_size, ignore_stale_grad);
  trainer.set_loss_scale(1);
  if (++clean_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
  return true;
}

void LossScaler::set_state(const State& s) {
  KILN_CHECK(s.scale > 0 && std::isfinite(s.scale) && s.clean_steps >= 0 && s.skipped >= 0, ValueError,
             "LossScaler: invalid state (scale {}, clean steps {}, skipped {})", s.scale, s.clean_steps, s.skipped);
  scale_ = s.scale;
  clean_steps_ = s.clean_steps;
  skipped_ = s.skipped;
}

}  // namespace kiln::amp
