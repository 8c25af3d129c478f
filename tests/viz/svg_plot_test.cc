#include "frontend/viz/svg_plot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "frontend/viz/nice_scale.h"
#include "tests/viz/svg_check.h"

namespace kiln::viz {
namespace {

TrainLog image_run(std::string label, double scale) {
  TrainLog r;
  r.label = std::move(label);
  for (int e = 1; e <= 5; ++e) {
    r.add_epoch(e, {{"loss", scale * 2.0 / e},
                    {"train_acc", 1 - 0.5 / e},
                    {"test_acc", 0.95 - 0.5 / e},
                    {"images_per_sec", 900 + 40 * e * scale}});
  }
  return r;
}

// The panel's y range as the picture states it.
std::pair<double, double> y_range(const test::SvgDoc& doc, const std::string& panel) {
  std::string g = "//s:g[@class='panel' and @data-panel='" + panel + "']";
  return {doc.number(g + "/@data-y-min"), doc.number(g + "/@data-y-max")};
}

TEST(SvgPlot, OneCurvePerRunAndSeriesWithAxesFromTheData) {
  std::vector<TrainLog> runs = {image_run("fp32", 1), image_run("bf16 & <hybrid>", 1.5)};
  std::string svg = training_curves_svg(runs, {.title = "LeNet"});
  test::SvgDoc doc = test::parse_and_render(svg, "plot_two_runs");
  ASSERT_TRUE(doc.ok());
  // 2 runs x (loss, train acc, test acc, images/s).
  EXPECT_EQ(doc.count("//s:path[@class='curve']"), 8);
  EXPECT_EQ(doc.strings("//s:g[@class='panel']/@data-panel"),
            (std::vector<std::string>{"loss", "accuracy", "throughput"}));
  EXPECT_EQ(doc.count("//s:path[@class='curve' and @data-run='bf16 & <hybrid>']"), 4);
  EXPECT_EQ(doc.count("//s:path[@data-series='test_acc' and @stroke-dasharray]"), 2);
  // Legend: both runs, then the train and test line styles.
  EXPECT_EQ(doc.strings("//s:g[@class='legend']/s:text"),
            (std::vector<std::string>{"fp32", "bf16 & <hybrid>", "train", "test (held-out data)"}));
  EXPECT_EQ(doc.strings("//s:text[@class='title']"), std::vector<std::string>{"LeNet"});
  EXPECT_EQ(doc.count("//s:text[@class='axis-name' and .='throughput (images/s)']"), 1);

  // Ranges: the nice scale of each panel's data (loss 2*1.5 .. 2/5; images/s 940 .. 1200).
  auto [lo, hi] = y_range(doc, "loss");
  NiceScale want = nice_scale(0.4, 3.0, 5);
  EXPECT_DOUBLE_EQ(lo, want.lo);
  EXPECT_DOUBLE_EQ(hi, want.hi);
  EXPECT_LE(lo, 0.4);
  EXPECT_GE(hi, 3.0);
  std::tie(lo, hi) = y_range(doc, "throughput");
  EXPECT_LE(lo, 940);
  EXPECT_GT(lo, 800);  // from the data, not from 0
  EXPECT_GE(hi, 1200);
  EXPECT_LT(hi, 1300);
  std::string g = "//s:g[@class='panel' and @data-panel='loss']";
  EXPECT_EQ(doc.number(g + "/@data-x-min"), 1);
  EXPECT_EQ(doc.number(g + "/@data-x-max"), 5);
  // The tick labels of the x axis are whole epochs.
  for (const std::string& t : doc.strings(g + "/s:text[@class='tick' and @text-anchor='middle']"))
    EXPECT_EQ(t.find('.'), std::string::npos) << t;
}

TEST(SvgPlot, TextRunsGetBitsPerByteAndTokensPerSecond) {
  TrainLog text;
  text.label = "gpt";
  for (int e = 1; e <= 3; ++e)
    text.add_epoch(e, {{"loss", 3.0 / e},
                       {"train_bits_per_byte", 4.0 / e},
                       {"test_bits_per_byte", 4.2 / e},
                       {"tokens_per_sec", 2e5}});
  std::vector<TrainLog> runs = {image_run("lenet", 1), text};
  test::SvgDoc doc = test::parse_and_render(training_curves_svg(runs), "plot_mixed");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:path[@class='curve']"), 4 + 4);
  EXPECT_EQ(doc.strings("//s:g[@class='panel']/@data-panel"),
            (std::vector<std::string>{"loss", "accuracy", "bits_per_byte", "throughput"}));
  EXPECT_EQ(doc.count("//s:text[@class='axis-name' and .='throughput (images/s, tokens/s)']"), 1);
}

TEST(SvgPlot, OneEpochAndGapsStillDraw) {
  TrainLog r;
  r.label = "short";
  r.add_epoch(1, {{"loss", 0.7}});
  test::SvgDoc doc = test::parse_and_render(training_curves_svg({&r, 1}), "plot_one_epoch");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:path[@class='curve']"), 1);
  EXPECT_EQ(doc.count("//s:circle"), 1);
  auto [lo, hi] = y_range(doc, "loss");
  EXPECT_LT(lo, 0.7);
  EXPECT_GT(hi, 0.7);

  r.add_epoch(2, {{"loss", std::nan("")}});
  r.add_epoch(3, {{"loss", 0.5}});
  doc = test::parse_and_render(training_curves_svg({&r, 1}), "plot_gap");
  std::string d = doc.strings("//s:path[@class='curve']/@d").at(0);
  EXPECT_EQ(std::count(d.begin(), d.end(), 'M'), 2) << d;  // two pieces: the NaN is a gap
}

}  // namespace
}  // namespace kiln::viz
