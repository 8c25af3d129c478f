#include "frontend/viz/trace_summary.h"

#include <gtest/gtest.h>

#include <map>

#include "tests/test_util.h"

namespace kiln::viz {
namespace {

// Two devices; on cpu(0)'s compute thread a CachedOp holds two nested ops.
constexpr const char* kTrace = R"JSON({"displayTimeUnit":"ns","traceEvents":[
{"name":"process_name","ph":"M","pid":1000,"tid":0,"args":{"name":"cpu(0)"}},
{"name":"process_name","ph":"M","pid":1001,"tid":0,"args":{"name":"cpu(1)"}},
{"name":"thread_name","ph":"M","pid":1000,"tid":1,"args":{"name":"compute"}},
{"name":"thread_name","ph":"M","pid":1000,"tid":2,"args":{"name":"copy"}},
{"name":"thread_name","ph":"M","pid":1001,"tid":3,"args":{"name":"compute"}},
{"name":"_zeros","cat":"compute","ph":"X","pid":1000,"tid":1,"ts":0,"dur":10,"args":{"bytes":4}},
{"name":"CachedOp","cat":"compute","ph":"X","pid":1000,"tid":1,"ts":10,"dur":100,"args":{"bytes":4}},
{"name":"CachedOp/Convolution","cat":"compute","ph":"X","pid":1000,"tid":1,"ts":10,"dur":60,"args":{"bytes":4}},
{"name":"CachedOp/Activation","cat":"compute","ph":"X","pid":1000,"tid":1,"ts":70,"dur":30,"args":{"bytes":4}},
{"name":"_zeros","cat":"compute","ph":"X","pid":1000,"tid":1,"ts":110,"dur":30,"args":{"bytes":4}},
{"name":"copy_to","cat":"copy","ph":"X","pid":1000,"tid":2,"ts":20,"dur":5,"args":{"bytes":4}},
{"name":"dot","cat":"compute","ph":"X","pid":1001,"tid":3,"ts":5,"dur":40,"args":{"bytes":4}}
]})JSON";

TEST(TraceSummary, ReadsLanesAndNesting) {
  std::vector<TraceEvent> events = parse_chrome_trace(kTrace, "t.json");
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(events[1].device, "cpu(0)");
  EXPECT_EQ(events[1].lane, "compute");
  EXPECT_EQ(events[1].depth, 0);
  EXPECT_EQ(events[2].depth, 1);
  EXPECT_EQ(events[3].depth, 1);
  EXPECT_EQ(events[4].depth, 0);  // starts where the CachedOp ends: not inside it
  EXPECT_EQ(events[5].lane, "copy");
}

TEST(TraceSummary, TotalsEqualTheTrace) {
  std::vector<TraceEvent> events = parse_chrome_trace(kTrace, "t.json");
  std::vector<LaneSummary> lanes = summarize_trace(events);
  ASSERT_EQ(lanes.size(), 3u);
  EXPECT_EQ(lanes[0].device + " " + lanes[0].lane, "cpu(0) compute");
  EXPECT_EQ(lanes[1].device + " " + lanes[1].lane, "cpu(0) copy");
  EXPECT_EQ(lanes[2].device + " " + lanes[2].lane, "cpu(1) compute");
  const LaneSummary& c0 = lanes[0];
  EXPECT_DOUBLE_EQ(c0.busy_us, 140);   // 10 + 100 + 30: the nested events are inside the CachedOp
  EXPECT_DOUBLE_EQ(c0.total_us, 230);  // every event once
  EXPECT_EQ(c0.events, 5);
  ASSERT_EQ(c0.ops.size(), 4u);
  EXPECT_EQ(c0.ops[0].name, "CachedOp");
  EXPECT_EQ(c0.ops[1].name, "CachedOp/Convolution");
  EXPECT_EQ(c0.ops[1].depth, 1);
  EXPECT_EQ(c0.ops[2].name, "_zeros");
  EXPECT_EQ(c0.ops[2].count, 2);
  EXPECT_DOUBLE_EQ(c0.ops[2].total_us, 40);
  EXPECT_DOUBLE_EQ(c0.ops[0].share, 100.0 / 140);
  // Depth-0 shares add up to one per lane; every op of every lane adds up to the trace.
  double all = 0, events_sum = 0;
  for (const LaneSummary& l : lanes) {
    double top = 0;
    for (const OpSummary& o : l.ops) {
      all += o.total_us;
      if (o.depth == 0) top += o.share;
    }
    EXPECT_NEAR(top, 1.0, 1e-12) << l.device << " " << l.lane;
  }
  for (const TraceEvent& e : events) events_sum += e.dur_us;
  EXPECT_DOUBLE_EQ(all, events_sum);

  std::string table = summary_table(lanes, 2);
  EXPECT_NE(table.find("cpu(0) compute: 5 events, busy 0.140 ms"), std::string::npos) << table;
  EXPECT_NE(table.find("(2 other ops)"), std::string::npos) << table;
  EXPECT_NE(table.find("all lanes: 7 events, 0.275 ms"), std::string::npos) << table;
}

TEST(TraceSummary, WhatIsNotATraceNamesTheFileAndEvent) {
  auto msg = test::error_of<ValueError>([] { parse_chrome_trace("{\"traceEvents\": [", "t.json"); });
  EXPECT_NE(msg.find("t.json: not JSON"), std::string::npos) << msg;
  msg = test::error_of<ValueError>([] { parse_chrome_trace("{\"events\": []}", "t.json"); });
  EXPECT_NE(msg.find("t.json: expected a Chrome trace"), std::string::npos) << msg;
  msg = test::error_of<ValueError>([] { parse_chrome_trace("[\n{\"ph\": \"X\", \"ts\": 1e999}]", "t.json"); });
  EXPECT_NE(msg.find("t.json, line 2, column 19: "), std::string::npos) << msg;
  msg = test::error_of<ValueError>(
      [] { parse_chrome_trace(R"([{"name":"a","ph":"X","pid":1,"tid":1,"ts":0}])", "t.json"); });
  EXPECT_NE(msg.find("t.json: event 0 (\"ph\":\"X\"): no number 'dur'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln::viz
