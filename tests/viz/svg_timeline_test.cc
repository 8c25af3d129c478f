#include "frontend/viz/svg_timeline.h"

#include <gtest/gtest.h>

#include "tests/viz/svg_check.h"

namespace kiln::viz {
namespace {

std::vector<TraceEvent> lanes_trace() {
  std::vector<TraceEvent> out;
  // cpu(0) compute: a CachedOp every 2 ms with two nested ops; cpu(0) copy: a copy every 3 ms.
  for (int i = 0; i < 10; ++i) {
    double t = 1000.0 * 2 * i;
    out.push_back({"CachedOp", "cpu(0)", "compute", 1000, 1, t, 1500, 0});
    out.push_back({"CachedOp/Convolution", "cpu(0)", "compute", 1000, 1, t, 1000, 1});
    out.push_back({"CachedOp/Activation", "cpu(0)", "compute", 1000, 1, t + 1000, 500, 1});
  }
  for (int i = 0; i < 7; ++i) out.push_back({"copy_to", "cpu(0)", "copy", 1000, 2, 3000.0 * i + 500, 200, 0});
  return out;
}

TEST(SvgTimeline, OneBarPerEventInTheWindow) {
  std::vector<TraceEvent> events = lanes_trace();
  test::SvgDoc doc = test::parse_and_render(timeline_svg(events, {.title = "all"}), "timeline_all");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:rect[@class='event']"), static_cast<int>(events.size()));
  EXPECT_EQ(doc.strings("//s:text[@class='lane']"), (std::vector<std::string>{"cpu(0) compute #1", "cpu(0) copy #2"}));
  EXPECT_EQ(doc.number("//s:g[@class='axis']/@data-t-max-ms"), 19.5);  // the last CachedOp ends at 19.5 ms

  // The first 5 ms: events that start before 5 ms (CachedOps at 0, 2, 4 ms with 5 nested ops: the
  // Activation at 5 ms is out; copies at 0.5 and 3.5 ms).
  doc = test::parse_and_render(timeline_svg(events, {.first_ms = 5, .title = "first 5 ms"}), "timeline_5ms");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:rect[@class='event']"), 3 + 5 + 2);
  EXPECT_EQ(doc.count("//s:rect[@class='event' and @data-name='CachedOp/Convolution']"), 3);
  EXPECT_EQ(doc.number("//s:g[@class='axis']/@data-t-max-ms"), 5);
  // A bar clipped at the window's end stays inside the plot.
  for (const std::string& x : doc.strings("//s:rect[@class='event']/@x")) EXPECT_LE(std::stod(x), 1180) << x;

  // From 10 ms on, for 4 ms: CachedOps at 10 and 12 ms, copies at 12.5 ms.
  doc = test::parse_and_render(timeline_svg(events, {.start_ms = 10, .first_ms = 4}), "timeline_from_10ms");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:rect[@class='event']"), 6 + 1);
  EXPECT_EQ(doc.number("//s:g[@class='axis']/@data-t-min-ms"), 10);
}

}  // namespace
}  // namespace kiln::viz
