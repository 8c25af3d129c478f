// models::make_optimizer: the optimizer and schedule `kiln train` builds from
// its option strings.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "frontend/kiln.h"
#include "models/train_recipe.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

TEST(TrainRecipe, BuildsTheNamedOptimizerAndSchedule) {
  auto opt = models::make_optimizer({.optimizer = "adamw", .lr = 0.4, .lr_schedule = "cosine", .warmup_steps = 4}, 20);
  EXPECT_EQ(opt->name(), "adamw");
  ASSERT_TRUE(opt->has_schedule());
  auto lr_at = [&](int64_t steps) {
    while (opt->num_update() < steps) opt->begin_step();
    return opt->learning_rate();
  };
  EXPECT_DOUBLE_EQ(lr_at(2), 0.2);  // warmup
  EXPECT_DOUBLE_EQ(lr_at(4), 0.4);
  EXPECT_NEAR(lr_at(12), 0.4 * (1 + std::cos(std::numbers::pi * 8 / 16)) / 2, 1e-15);
  EXPECT_NEAR(lr_at(20), 0, 1e-15);

  auto step = models::make_optimizer({.optimizer = "sgd", .lr = 1, .momentum = 0.9, .lr_schedule = "step:3:0.5"}, 100);
  EXPECT_EQ(step->name(), "sgd");
  for (int i = 0; i < 4; ++i) step->begin_step();
  EXPECT_DOUBLE_EQ(step->learning_rate(), 0.5);

  auto plain = models::make_optimizer({.optimizer = "adam", .lr = 0.01}, 10);
  EXPECT_FALSE(plain->has_schedule());
  auto warm = models::make_optimizer({.lr = 0.1, .warmup_steps = 10}, 100);
  warm->begin_step();
  EXPECT_DOUBLE_EQ(warm->learning_rate(), 0.01);
}

TEST(TrainRecipe, UnknownNamesAreErrorsThatListTheChoices) {
  EXPECT_CONTAINS(test::error_of<ValueError>([] { models::make_optimizer({.optimizer = "lamb"}, 10); }),
                  "'sgd', 'adam' or 'adamw'");
  EXPECT_CONTAINS(test::error_of<ValueError>([] { models::make_optimizer({.lr_schedule = "linear"}, 10); }),
                  "'constant', 'cosine' or 'step:N:F'");
  EXPECT_CONTAINS(
      test::error_of<ValueError>([] { models::make_optimizer({.lr_schedule = "cosine", .warmup_steps = 10}, 10); }),
      "must exceed --warmup-steps");
}

}  // namespace
}  // namespace kiln
