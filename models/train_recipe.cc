#include "models/train_recipe.h"

#include <cstdio>

#include "frontend/train/lr_scheduler.h"

namespace kiln::models {
namespace {

optim::Schedule make_schedule(const Recipe& r, int64_t total_steps) {
  const lr::Warmup warmup{.warmup_steps = r.warmup_steps};
  if (r.lr_schedule == "constant") {
    if (r.warmup_steps == 0) return nullptr;
    const double lr = r.lr;
    return lr::LinearWarmup(r.warmup_steps, 0, [lr](int64_t) { return lr; });
  }
  if (r.lr_schedule == "cosine") {
    KILN_CHECK(total_steps > r.warmup_steps, ValueError,
               "--lr-schedule cosine: the run's {} steps must exceed --warmup-steps {}", total_steps, r.warmup_steps);
    return lr::CosineScheduler({warmup, total_steps, r.lr, 0.0});
  }
  long long step = 0;
  double factor = 0;
  char tail = 0;
  if (std::sscanf(r.lr_schedule.c_str(), "step:%lld:%lf%c", &step, &factor, &tail) == 2) {
    return lr::FactorScheduler({warmup, step, factor, 1e-8, r.lr});
  }
  throw ValueError(fmt::format(
      "unknown learning-rate schedule '{}': expected 'constant', 'cosine' or 'step:N:F' (times F every N steps)",
      r.lr_schedule));
}

}  // namespace

std::shared_ptr<optim::Optimizer> make_optimizer(const Recipe& r, int64_t total_steps) {
  std::shared_ptr<optim::Optimizer> opt;
  if (r.optimizer == "sgd") {
    opt = std::make_shared<optim::SGD>(optim::SGDOptions{.lr = r.lr, .momentum = r.momentum, .wd = r.wd});
  } else if (r.optimizer == "adam") {
    opt = std::make_shared<optim::Adam>(optim::AdamOptions{.lr = r.lr, .wd = r.wd});
  } else if (r.optimizer == "adamw") {
    opt = std::make_shared<optim::AdamW>(optim::AdamWOptions{.lr = r.lr, .wd = r.wd});
  } else {
    throw ValueError(fmt::format("unknown optimizer '{}': expected 'sgd', 'adam' or 'adamw'", r.optimizer));
  }
  if (optim::Schedule s = make_schedule(r, total_steps)) opt->set_schedule(std::move(s));
  return opt;
}

}  // namespace kiln::models
