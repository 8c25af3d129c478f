#include "frontend/train/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

#include "ir/error.h"

namespace kiln::lr {
namespace {

void check_warmup(const Warmup& w, double base_lr, const char* who) {
  KILN_CHECK(w.warmup_steps >= 0, ValueError, "{}: warmup_steps must be >= 0, got {}", who, w.warmup_steps);
  KILN_CHECK(w.warmup_begin_lr <= base_lr, ValueError, "{}: warmup_begin_lr ({}) must not exceed base_lr ({})", who,
             w.warmup_begin_lr, base_lr);
  KILN_CHECK(w.warmup_mode == "linear" || w.warmup_mode == "constant", ValueError,
             "{}: warmup_mode must be 'linear' or 'constant', got '{}'", who, w.warmup_mode);
}

// The warmup rate when num_update < warmup_steps.
std::optional<double> warmup_lr(const Warmup& w, double base_lr, int64_t num_update) {
  if (num_update >= w.warmup_steps) return std::nullopt;
  if (w.warmup_mode == "constant") return w.warmup_begin_lr;
  return w.warmup_begin_lr +
         (base_lr - w.warmup_begin_lr) * static_cast<double>(num_update) / static_cast<double>(w.warmup_steps);
}

void check_factor(double factor, const char* who) {
  KILN_CHECK(factor > 0 && factor <= 1, ValueError, "{}: factor must be in (0, 1] so that the rate decreases, got {}",
             who, factor);
}

void check_decay(const Warmup& w, int64_t max_update, const char* who) {
  KILN_CHECK(max_update >= 1, ValueError, "{}: max_update must be >= 1, got {}", who, max_update);
  KILN_CHECK(max_update > w.warmup_steps, ValueError, "{}: max_update ({}) must exceed warmup_steps ({})", who,
             max_update, w.warmup_steps);
}

}  // namespace

FactorScheduler::FactorScheduler(FactorOptions o) : o_(std::move(o)) {
  KILN_CHECK(o_.step >= 1, ValueError, "FactorScheduler: step must be >= 1, got {}", o_.step);
  check_factor(o_.factor, "FactorScheduler");
  check_warmup(o_, o_.base_lr, "FactorScheduler");
}

double FactorScheduler::operator()(int64_t num_update) const {
  if (auto w = warmup_lr(o_, o_.base_lr, num_update)) return *w;
  const int64_t k = num_update >= 1 ? (num_update - 1) / o_.step : 0;
  return std::max(o_.base_lr * std::pow(o_.factor, static_cast<double>(k)), o_.stop_factor_lr);
}

MultiFactorScheduler::MultiFactorScheduler(MultiFactorOptions o) : o_(std::move(o)) {
  for (size_t i = 0; i < o_.steps.size(); ++i) {
    KILN_CHECK(o_.steps[i] >= 1, ValueError, "MultiFactorScheduler: steps must be >= 1, got {} at position {}",
               o_.steps[i], i);
    KILN_CHECK(i == 0 || o_.steps[i] > o_.steps[i - 1], ValueError,
               "MultiFactorScheduler: steps must increase, got {} after {}", o_.steps[i], o_.steps[i - 1]);
  }
  check_factor(o_.factor, "MultiFactorScheduler");
  check_warmup(o_, o_.base_lr, "MultiFactorScheduler");
}

double MultiFactorScheduler::operator()(int64_t num_update) const {
  if (auto w = warmup_lr(o_, o_.base_lr, num_update)) return *w;
  double lr = o_.base_lr;
  for (int64_t s : o_.steps)
    if (num_update > s) lr *= o_.factor;
  return lr;
}

CosineScheduler::CosineScheduler(CosineOptions o) : o_(std::move(o)) {
  check_decay(o_, o_.max_update, "CosineScheduler");
  check_warmup(o_, o_.base_lr, "CosineScheduler");
}

double CosineScheduler::operator()(int64_t num_update) const {
  if (auto w = warmup_lr(o_, o_.base_lr, num_update)) return *w;
  if (num_update > o_.max_update) return o_.final_lr;
  const double progress =
      static_cast<double>(num_update - o_.warmup_steps) / static_cast<double>(o_.max_update - o_.warmup_steps);
  return o_.final_lr + (o_.base_lr - o_.final_lr) * (1 + std::cos(std::numbers::pi * progress)) / 2;
}

PolyScheduler::PolyScheduler(PolyOptions o) : o_(std::move(o)) {
  check_decay(o_, o_.max_update, "PolyScheduler");
  check_warmup(o_, o_.base_lr, "PolyScheduler");
}

double PolyScheduler::operator()(int64_t num_update) const {
  if (auto w = warmup_lr(o_, o_.base_lr, num_update)) return *w;
  if (num_update > o_.max_update) return o_.final_lr;
  const double left =
      1 - static_cast<double>(num_update - o_.warmup_steps) / static_cast<double>(o_.max_update - o_.warmup_steps);
  return o_.final_lr + (o_.base_lr - o_.final_lr) * std::pow(left, o_.pwr);
}

LinearWarmup::LinearWarmup(int64_t warmup_steps, double begin_lr, optim::Schedule after)
    : steps_(warmup_steps), begin_lr_(begin_lr), after_(std::move(after)) {
  KILN_CHECK(warmup_steps >= 0, ValueError, "LinearWarmup: warmup_steps must be >= 0, got {}", warmup_steps);
  KILN_CHECK(static_cast<bool>(after_), ValueError, "LinearWarmup: the schedule after the warmup is empty");
}

double LinearWarmup::operator()(int64_t num_update) const {
  if (num_update < steps_) {
    const double target = after_(1);
    return begin_lr_ + (target - begin_lr_) * static_cast<double>(num_update) / static_cast<double>(steps_);
  }
  return after_(num_update - steps_ + 1);
}

}  // namespace kiln::lr
