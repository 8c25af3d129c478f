// Learning-rate schedules against MXNet's definitions (values worked out
// here), their warmup, their errors, and that a checkpointed step count is
// all a resumed schedule needs.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "frontend/kiln.h"
#include "frontend/train/train_state.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

TEST(LrScheduler, FactorDecaysEveryStepUpdatesDownToTheFloor) {
  lr::FactorScheduler s({.step = 3, .factor = 0.5, .stop_factor_lr = 0.02, .base_lr = 0.1});
  // MXNet: the rate changes once num_update exceeds count + step.
  const double want[] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.02, 0.02};
  for (int u = 1; u <= 11; ++u) EXPECT_DOUBLE_EQ(s(u), want[u - 1]) << u;
}

TEST(LrScheduler, MultiFactorDecaysAfterEachListedStep) {
  lr::MultiFactorScheduler s({.steps = {2, 5}, .factor = 0.1, .base_lr = 1});
  const double want[] = {1, 1, 0.1, 0.1, 0.1, 0.01, 0.01};
  for (int u = 1; u <= 7; ++u) EXPECT_NEAR(s(u), want[u - 1], 1e-15) << u;
}

TEST(LrScheduler, CosineWithLinearWarmupIsMxnetsCosineScheduler) {
  lr::CosineScheduler s({{.warmup_steps = 4, .warmup_begin_lr = 0.02}, 20, 0.1, 0.001});
  for (int u = 0; u < 4; ++u) EXPECT_DOUBLE_EQ(s(u), 0.02 + (0.1 - 0.02) * u / 4) << u;
  for (int u = 4; u <= 20; ++u) {
    double want = 0.001 + (0.1 - 0.001) * (1 + std::cos(std::numbers::pi * (u - 4) / 16.0)) / 2;
    EXPECT_NEAR(s(u), want, 1e-15) << u;
  }
  EXPECT_DOUBLE_EQ(s(4), 0.1);
  EXPECT_NEAR(s(20), 0.001, 1e-15);
  EXPECT_DOUBLE_EQ(s(1000), 0.001);
}

TEST(LrScheduler, ConstantWarmupAndPolyDecay) {
  lr::PolyScheduler s({{.warmup_steps = 2, .warmup_begin_lr = 0.01, .warmup_mode = "constant"}, 12, 0.1, 1, 0});
  EXPECT_DOUBLE_EQ(s(0), 0.01);
  EXPECT_DOUBLE_EQ(s(1), 0.01);
  EXPECT_DOUBLE_EQ(s(2), 0.1);
  EXPECT_NEAR(s(7), 0.05, 1e-15);  // pwr 1: linear from 0.1 at step 2 to 0 at step 12
  EXPECT_DOUBLE_EQ(s(12), 0);
  EXPECT_DOUBLE_EQ(s(13), 0);
}

TEST(LrScheduler, LinearWarmupInFrontOfAnySchedule) {
  lr::LinearWarmup s(5, 0, lr::FactorScheduler({.step = 2, .factor = 0.5, .base_lr = 0.4}));
  EXPECT_DOUBLE_EQ(s(0), 0);
  EXPECT_DOUBLE_EQ(s(1), 0.08);
  EXPECT_DOUBLE_EQ(s(4), 0.32);
  EXPECT_DOUBLE_EQ(s(5), 0.4);  // the factor schedule's own step 1
  EXPECT_DOUBLE_EQ(s(6), 0.4);
  EXPECT_DOUBLE_EQ(s(7), 0.2);
}

TEST(LrScheduler, BadValuesAreNamed) {
  EXPECT_CONTAINS(test::error_of<ValueError>([] { lr::FactorScheduler({.step = 0}); }), "step must be >= 1, got 0");
  EXPECT_CONTAINS(test::error_of<ValueError>([] { lr::FactorScheduler({.step = 2, .factor = 1.5}); }), "1.5");
  EXPECT_CONTAINS(test::error_of<ValueError>([] { lr::CosineScheduler({.max_update = 0}); }), "max_update");
  EXPECT_CONTAINS(test::error_of<ValueError>([] {
                    lr::CosineScheduler({{.warmup_steps = 10}, 10, 0.1, 0});
                  }),
                  "must exceed warmup_steps");
  EXPECT_CONTAINS(test::error_of<ValueError>([] { lr::MultiFactorScheduler({.steps = {5, 3}}); }), "3 after 5");
  EXPECT_CONTAINS(test::error_of<ValueError>([] {
                    lr::CosineScheduler({{.warmup_steps = 1, .warmup_begin_lr = 1}, 5, 0.1, 0});
                  }),
                  "warmup_begin_lr");
  EXPECT_CONTAINS(test::error_of<ValueError>([] {
                    lr::CosineScheduler({{.warmup_steps = 1, .warmup_mode = "cubic"}, 5, 0.1, 0});
                  }),
                  "'cubic'");
}

// The Trainer's steps drive the schedule; a checkpoint taken mid-run restores
// the step count, and with it the rate, into a fresh Trainer.
TEST(LrScheduler, TrainerFollowsTheScheduleAcrossACheckpoint) {
  auto make = [] {
    auto opt = std::make_shared<optim::AdamW>(optim::AdamWOptions{.wd = 0});
    opt->set_schedule(lr::CosineScheduler({{.warmup_steps = 2}, 10, 0.1, 0.0}));
    return opt;
  };
  lr::CosineScheduler ref({{.warmup_steps = 2}, 10, 0.1, 0.0});
  nn::Dense d(1, "", true, true, 2);
  d.initialize(init::One());
  Trainer trainer(d.collect_params(), make());
  NDArray x = nd::array(std::vector<float>{1, 2}, Shape{1, 2});
  auto step = [&](Trainer& t) {
    {
      autograd::Record r;
      autograd::backward({nd::sum(d(x))});
    }
    t.step(1);
  };
  for (int s = 1; s <= 3; ++s) {
    step(trainer);
    EXPECT_DOUBLE_EQ(trainer.learning_rate(), ref(s));
  }
  data::DataLoader loader(data::ArrayDataset(std::vector<float>(8, 0.0f), Shape{2}, std::vector<float>(4, 0.0f)), 2);
  train::Checkpoint c = train::capture_training(d.collect_params(), trainer, {.step = 3}, loader);
  Trainer resumed(d.collect_params(), make());
  train::TrainingState st = train::decode_training(c, "memory", d.collect_params(), resumed, loader);
  train::apply_training(st, d.collect_params(), resumed, loader);
  EXPECT_EQ(resumed.optimizer().num_update(), 3);
  EXPECT_DOUBLE_EQ(resumed.learning_rate(), ref(3));
  step(resumed);
  EXPECT_DOUBLE_EQ(resumed.learning_rate(), ref(4));
}

}  // namespace
}  // namespace kiln
