// The optimizer, learning-rate schedule and gradient clipping of a training
// job, chosen by name (what `kiln train --optimizer --lr-schedule
// --warmup-steps --clip-grad-norm` pass).
//
//   models::Recipe r{.optimizer = "adamw", .lr = 3e-4, .wd = 0.01, .lr_schedule = "cosine", .warmup_steps = 100};
//   Trainer trainer(net.collect_params(), models::make_optimizer(r, total_steps));
//   trainer.set_max_grad_norm(r.clip_grad_norm);
//
// optimizer: "sgd" (with momentum), "adam" or "adamw" (wd is AdamW's
// decoupled decay there, the L2 term for the others). lr_schedule:
// "constant", "cosine" (lr::CosineScheduler from lr down to 0 over
// total_steps) or "step:N:F" (lr::FactorScheduler: times F every N steps);
// warmup_steps in front of any of them (linear from 0). ValueError naming
// the value for an unknown optimizer or schedule.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "frontend/train/optimizer.h"

namespace kiln::models {

struct Recipe {
  std::string optimizer = "sgd";
  double lr = 0.1;
  double momentum = 0;
  double wd = 0;
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  double clip_grad_norm = 0;  // 0: no clipping (Trainer::set_max_grad_norm)
};

std::shared_ptr<optim::Optimizer> make_optimizer(const Recipe& recipe, int64_t total_steps);

}  // namespace kiln::models
