#include "frontend/viz/nice_scale.h"

#include <gtest/gtest.h>

namespace kiln::viz {
namespace {

TEST(NiceScale, CoversTheDataWithNiceSteps) {
  NiceScale s = nice_scale(0.113, 0.871, 5);
  EXPECT_DOUBLE_EQ(s.lo, 0);
  EXPECT_DOUBLE_EQ(s.hi, 1);
  EXPECT_DOUBLE_EQ(s.step, 0.2);
  EXPECT_EQ(s.ticks().size(), 6u);

  s = nice_scale(812, 4533, 5);
  EXPECT_DOUBLE_EQ(s.step, 1000);
  EXPECT_DOUBLE_EQ(s.lo, 0);
  EXPECT_DOUBLE_EQ(s.hi, 5000);

  s = nice_scale(-3.2, 7.9, 4);
  EXPECT_LE(s.lo, -3.2);
  EXPECT_GE(s.hi, 7.9);
  EXPECT_DOUBLE_EQ(s.step, 5);
}

TEST(NiceScale, EveryRangeIsCoveredTightly) {
  for (double lo : {-1234.5, -1.0, 0.0, 0.0031, 0.5, 17.0, 99999.0}) {
    for (double span : {1e-3, 0.37, 1.0, 9.9, 250.0, 1e6}) {
      NiceScale s = nice_scale(lo, lo + span, 5);
      EXPECT_LE(s.lo, lo) << lo << " " << span;
      EXPECT_GE(s.hi, lo + span) << lo << " " << span;
      // Not more than a step of slack at either end.
      EXPECT_GT(s.lo + s.step, lo) << lo << " " << span;
      EXPECT_LT(s.hi - s.step, lo + span) << lo << " " << span;
      size_t n = s.ticks().size();
      EXPECT_GE(n, 3u) << lo << " " << span;
      EXPECT_LE(n, 12u) << lo << " " << span;
    }
  }
}

TEST(NiceScale, OneValueGetsAnAxisAroundIt) {
  NiceScale s = nice_scale(0.8, 0.8);
  EXPECT_LT(s.lo, 0.8);
  EXPECT_GT(s.hi, 0.8);
  s = nice_scale(0, 0);
  EXPECT_LT(s.lo, 0);
  EXPECT_GT(s.hi, 0);
}

TEST(NiceScale, TickLabelsHaveTheDecimalsTheStepNeeds) {
  EXPECT_EQ(format_tick(0.4, 0.2), "0.4");
  EXPECT_EQ(format_tick(0.75, 0.25), "0.75");
  EXPECT_EQ(format_tick(2000, 1000), "2000");
  EXPECT_EQ(format_tick(-1e-17, 0.1), "0.0");
  EXPECT_EQ(format_tick(7.5, 2.5), "7.5");
}

}  // namespace
}  // namespace kiln::viz
