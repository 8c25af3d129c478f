// The backend-neutral part of device graphs (runtime/graph_capture.h): which
// op sequences may be recorded, the statistics, the switch; and that CPU
// devices never take part. Runs everywhere (the GPU side:
// tests/cuda/cuda_graph_test.cc).
#include <gtest/gtest.h>

#include <vector>

#include "frontend/kiln.h"
#include "runtime/device_backend.h"
#include "runtime/engine.h"
#include "runtime/graph_capture.h"

namespace kiln {
namespace {

bool all_capturable(OpId) { return true; }

TEST(GraphCapture, PlainOpsAreCapturable) {
  std::vector<OpId> ops{OpId::kFullyConnected, OpId::kActivation, OpId::kFullyConnected};
  bool draws[3] = {false, false, false};
  EXPECT_EQ(capture_blocker(ops, draws, false, all_capturable), std::nullopt);
}

TEST(GraphCapture, RandomDrawsBlockAndNameTheOp) {
  std::vector<OpId> ops{OpId::kFullyConnected, OpId::kDropout};
  bool draws[2] = {false, true};
  std::string detail;
  EXPECT_EQ(capture_blocker(ops, draws, false, all_capturable, &detail), GraphFallback::kRandomPerCall);
  EXPECT_EQ(detail, "Dropout");
  // The same op drawing nothing (Dropout outside training) does not block.
  draws[1] = false;
  EXPECT_EQ(capture_blocker(ops, draws, false, all_capturable), std::nullopt);
}

TEST(GraphCapture, AnUnsafeKernelBlocksAndIsNamed) {
  std::vector<OpId> ops{OpId::kFullyConnected, OpId::kPick, OpId::kActivation};
  bool draws[3] = {};
  std::string detail;
  auto no_pick = [](OpId op) { return op != OpId::kPick; };
  EXPECT_EQ(capture_blocker(ops, draws, false, no_pick, &detail), GraphFallback::kUnsafeOp);
  EXPECT_EQ(detail, "pick");
}

TEST(GraphCapture, EmptyBindingsBlock) {
  std::vector<OpId> ops{OpId::kActivation};
  bool draws[1] = {};
  EXPECT_EQ(capture_blocker(ops, draws, true, all_capturable), GraphFallback::kEmptyArray);
}

TEST(GraphCapture, StatsCountByReasonAndPrint) {
  graph_capture_reset_stats();
  graph_capture_count_capture(false);
  graph_capture_count_capture(true);
  graph_capture_count_replay();
  graph_capture_count_warmup();
  graph_capture_count_fallback(GraphFallback::kUnsafeOp);
  graph_capture_count_fallback(GraphFallback::kUnsafeOp);
  graph_capture_count_fallback(GraphFallback::kDisabled);
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_EQ(s.captures, 2);
  EXPECT_EQ(s.recaptures, 1);
  EXPECT_EQ(s.replays, 1);
  EXPECT_EQ(s.warmups, 1);
  EXPECT_EQ(s.fallbacks[static_cast<int>(GraphFallback::kUnsafeOp)], 2);
  EXPECT_EQ(s.total_fallbacks(), 3);
  EXPECT_EQ(s.to_string(),
            "captures 2 (recaptured 1), replays 1, warm-up runs 1, fallbacks 3: disabled 1, op not capturable 2");
  graph_capture_reset_stats();
  EXPECT_EQ(graph_capture_stats().to_string(), "captures 0 (recaptured 0), replays 0, warm-up runs 0, fallbacks 0");
}

TEST(GraphCapture, SwitchOverridesTheEnvironment) {
  const bool before = graph_capture_enabled();
  graph_capture_set_enabled(false);
  EXPECT_FALSE(graph_capture_enabled());
  graph_capture_set_enabled(true);
  EXPECT_TRUE(graph_capture_enabled());
  graph_capture_set_enabled(before);
}

TEST(GraphCapture, CpusRecordNoGraphs) {
  EXPECT_EQ(device_backend(DeviceKind::kCPU).graph_capture(), nullptr);
  // A hybridized block on a CPU runs as before and counts nothing.
  graph_capture_reset_stats();
  nd::random::seed(3);
  nn::HybridSequential net;
  net.add(nn::Dense(8, "relu"), nn::Dense(2));
  net.initialize();
  net.hybridize();
  NDArray x = nd::random::normal({1, 4});
  NDArray y;
  for (int i = 0; i < 3; ++i) y = net(x);
  y.wait_to_read();
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_EQ(s.captures + s.replays + s.warmups + s.total_fallbacks(), 0) << s.to_string();
}

}  // namespace
}  // namespace kiln
