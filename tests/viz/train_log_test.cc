#include "frontend/viz/train_log.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/test_util.h"

namespace kiln::viz {
namespace {

using test::error_of;

TEST(TrainLog, ReadsWhatKilnTrainWrites) {
  TrainLog log = parse_train_log(
      "{\"epoch\":1,\"loss\":1.2,\"train_acc\":0.5,\"test_acc\":0.6,\"seconds\":3.0,\"images_per_sec\":1000}\n"
      "\n"
      "{\"epoch\":2,\"loss\":0.7,\"train_acc\":0.7,\"test_acc\":0.72,\"seconds\":3.1,\"images_per_sec\":1100}\n",
      "run.jsonl");
  EXPECT_EQ(log.epochs, (std::vector<double>{1, 2}));
  ASSERT_EQ(log.series.size(), 4u);  // seconds is not plotted
  EXPECT_EQ(log.series.at("loss"), (std::vector<double>{1.2, 0.7}));
  EXPECT_EQ(log.series.at("images_per_sec"), (std::vector<double>{1000, 1100}));
}

TEST(TrainLog, NullIsAGapAndAResumedRunReplacesItsEpochs) {
  TrainLog log = parse_train_log(
      "{\"epoch\":1,\"loss\":1}\n{\"epoch\":2,\"loss\":null}\n{\"epoch\":3,\"loss\":0.5}\n"
      "{\"epoch\":2,\"loss\":0.8}\n{\"epoch\":3,\"loss\":0.6}\n",
      "x");
  EXPECT_EQ(log.epochs, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(log.series.at("loss"), (std::vector<double>{1, 0.8, 0.6}));
  log = parse_train_log("{\"epoch\":1,\"loss\":null}\n", "x");
  EXPECT_TRUE(std::isnan(log.series.at("loss")[0]));
}

TEST(TrainLog, BadLinesNameTheFileAndLine) {
  auto msg = error_of<ValueError>([] { parse_train_log("{\"epoch\":1,\"loss\":1}\nnot json\n", "a.jsonl"); });
  EXPECT_NE(msg.find("a.jsonl, line 2: not JSON"), std::string::npos) << msg;
  msg = error_of<ValueError>([] { parse_train_log("{\"epoch\":1e999,\"loss\":1}\n", "a.jsonl"); });
  EXPECT_NE(msg.find("a.jsonl, line 1: not JSON"), std::string::npos) << msg;
  msg = error_of<ValueError>([] { parse_train_log("{\"epoch\":1,\"loss\":1e300}\n", "a.jsonl"); });
  EXPECT_NE(msg.find("a.jsonl, line 1: field 'loss' is 1e+300, beyond what a chart shows"), std::string::npos) << msg;
  msg = error_of<ValueError>([] { parse_train_log("\n{\"epoch\":1}\n", "a.jsonl"); });
  EXPECT_NE(msg.find("a.jsonl, line 2: no field 'loss'"), std::string::npos) << msg;
  msg = error_of<ValueError>(
      [] { parse_train_log("{\"epoch\":1,\"loss\":1,\"test_acc\":0.5}\n{\"epoch\":2,\"loss\":1}\n", "a.jsonl"); });
  EXPECT_NE(msg.find("a.jsonl, line 2: no field 'test_acc' (line 1 has it)"), std::string::npos) << msg;
  msg = error_of<ValueError>([] { parse_train_log("{\"epoch\":1,\"loss\":\"low\"}\n", "a.jsonl"); });
  EXPECT_NE(msg.find("a.jsonl, line 1: field 'loss' is string"), std::string::npos) << msg;
  msg = error_of<ValueError>([] { parse_train_log("[1,2]\n", "a.jsonl"); });
  EXPECT_NE(msg.find("a.jsonl, line 1: expected a JSON object"), std::string::npos) << msg;
}

TEST(TrainLog, AnEmptyLogIsAnError) {
  auto msg = error_of<ValueError>([] { parse_train_log("\n  \n", "empty.jsonl"); });
  EXPECT_NE(msg.find("empty.jsonl: the log is empty"), std::string::npos) << msg;
  msg = error_of<IOError>([] { read_train_log("/nonexistent/kiln.jsonl"); });
  EXPECT_NE(msg.find("/nonexistent/kiln.jsonl"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln::viz
