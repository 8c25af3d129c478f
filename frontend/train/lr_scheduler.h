// Learning-rate schedules (MXNet's mx.lr_scheduler): the learning rate as a
// function of the number of updates, with an optional warmup in front.
//
//   optim::AdamW opt({.wd = 0.01});
//   opt.set_schedule(lr::CosineScheduler({.max_update = 10000, .base_lr = 3e-4, .final_lr = 3e-5,
//                                          .warmup_steps = 500}));
//   Trainer trainer(net.collect_params(), opt);   // every step reads the schedule
//
//   opt.set_schedule(lr::FactorScheduler({.step = 1000, .factor = 0.5, .base_lr = 0.1}));
//   opt.set_schedule(lr::MultiFactorScheduler({.steps = {3000, 6000}, .factor = 0.1, .base_lr = 0.1}));
//   opt.set_schedule(lr::LinearWarmup(500, 0.0, lr::FactorScheduler({...})));   // warmup in front of any schedule
//
// A schedule is called with num_update, the optimizer's step counter (1 at
// the first step, as MXNet counts). Every schedule here is a pure function of
// num_update (MXNet's FactorScheduler mutates itself; the values are the
// same), so a checkpoint's step counter is all the state a schedule has: a
// resumed run with the same schedule continues the same curve.
//
// Warmup (every scheduler's warmup_* fields, MXNet's): for num_update <
// warmup_steps the rate is warmup_begin_lr + (base_lr - warmup_begin_lr) *
// num_update / warmup_steps ("linear") or warmup_begin_lr ("constant").
//
// Constructors throw ValueError for values MXNet rejects (a step < 1, a factor
// > 1, warmup_begin_lr > base_lr, max_update < 1, decreasing steps), naming
// the value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frontend/train/optimizer.h"

namespace kiln::lr {

struct Warmup {
  int64_t warmup_steps = 0;
  double warmup_begin_lr = 0;
  std::string warmup_mode = "linear";  // or "constant"
};

// lr = max(base_lr * factor^k, stop_factor_lr) with k = floor((num_update - 1)
// / step) after warmup: the rate is multiplied by factor every `step` updates.
struct FactorOptions : Warmup {
  int64_t step = 1;
  double factor = 1;
  double stop_factor_lr = 1e-8;
  double base_lr = 0.01;
};
class FactorScheduler {
 public:
  explicit FactorScheduler(FactorOptions o);
  double operator()(int64_t num_update) const;

 private:
  FactorOptions o_;
};

// lr = base_lr * factor^k, k = how many of `steps` (increasing) are below num_update.
struct MultiFactorOptions : Warmup {
  std::vector<int64_t> steps;
  double factor = 1;
  double base_lr = 0.01;
};
class MultiFactorScheduler {
 public:
  explicit MultiFactorScheduler(MultiFactorOptions o);
  double operator()(int64_t num_update) const;

 private:
  MultiFactorOptions o_;
};

// After warmup, final_lr + (base_lr - final_lr) * (1 + cos(pi * (num_update -
// warmup_steps) / (max_update - warmup_steps))) / 2 until max_update, then
// final_lr.
struct CosineOptions : Warmup {
  int64_t max_update = 0;
  double base_lr = 0.01;
  double final_lr = 0;
};
class CosineScheduler {
 public:
  explicit CosineScheduler(CosineOptions o);
  double operator()(int64_t num_update) const;

 private:
  CosineOptions o_;
};

// After warmup, final_lr + (base_lr - final_lr) * (1 - (num_update -
// warmup_steps) / (max_update - warmup_steps))^pwr until max_update, then
// final_lr (pwr 1: a linear decay).
struct PolyOptions : Warmup {
  int64_t max_update = 0;
  double base_lr = 0.01;
  double pwr = 2;
  double final_lr = 0;
};
class PolyScheduler {
 public:
  explicit PolyScheduler(PolyOptions o);
  double operator()(int64_t num_update) const;

 private:
  PolyOptions o_;
};

// Linear warmup in front of any schedule: begin_lr + (after(1) - begin_lr) *
// num_update / warmup_steps for num_update < warmup_steps, then
// after(num_update - warmup_steps + 1): the wrapped schedule starts its own
// count at 1 when the warmup ends.
class LinearWarmup {
 public:
  LinearWarmup(int64_t warmup_steps, double begin_lr, optim::Schedule after);
  double operator()(int64_t num_update) const;

 private:
  int64_t steps_;
  double begin_lr_;
  optim::Schedule after_;
};

}  // namespace kiln::lr
