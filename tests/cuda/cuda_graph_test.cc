// CUDA graphs of hybridized blocks (runtime/graph_capture.h,
// backends/cuda/graph_capture.cc, frontend/graph_executor.cc): a replay gives
// the normal launches' results bit for bit (the chapter's MLP, a small CNN,
// a training step), follows new inputs, leaves earlier outputs alone; what
// cannot be captured falls back and is counted with its reason; the switch
// turns replay off. TF32 is off (the comparisons are exact anyway: the same
// kernels run on the same data). Every test skips with one line without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/kiln.h"
#include "models/zoo.h"
#include "runtime/engine.h"
#include "runtime/graph_capture.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/graph_replay_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

[[maybe_unused]] const bool kTf32Off = [] { return setenv("KILN_CUDA_TF32", "0", 1) == 0; }();

constexpr Device kGpu = Device::cuda(0);

int64_t fallbacks(GraphFallback reason) { return graph_capture_stats().fallbacks[static_cast<int>(reason)]; }

std::vector<NDArray> inputs(const Shape& shape, int n, uint64_t seed) {
  return test::inputs_on(kGpu, shape, n, seed);
}

TEST(CudaGraph, ChapterMlpReplayMatchesNormalLaunchesBitForBit) {
  KILN_REQUIRE_CUDA();
  nd::random::seed(0);
  auto net = models::mlp_chapter();
  net.initialize(init::Xavier(), kGpu);
  net.hybridize();
  std::vector<NDArray> xs = inputs({1, 512}, 3, 1);
  test::first_call(net, xs[0]);
  graph_capture_reset_stats();
  test::expect_replay_matches(net, xs, 3);
  engine::wait_all();
  GraphCaptureStats s = graph_capture_stats();
  // Graphs off: 3 runs (kDisabled); on: a warm-up run, a capture, then replays.
  EXPECT_EQ(s.captures, 1) << s.to_string();
  EXPECT_EQ(s.warmups, 1) << s.to_string();
  EXPECT_EQ(s.replays, 3 * 3 - 1) << s.to_string();
  EXPECT_EQ(s.fallbacks[static_cast<int>(GraphFallback::kDisabled)], 3) << s.to_string();
  EXPECT_EQ(s.total_fallbacks(), 3) << s.to_string();
}

TEST(CudaGraph, SmallCnnReplayMatchesNormalLaunchesBitForBit) {
  KILN_REQUIRE_CUDA();
  nd::random::seed(0);
  nn::HybridSequential net;
  net.add(nn::Conv2D(8, 3, 1, 1), nn::BatchNorm(), nn::Activation("relu"), nn::MaxPool2D(2), nn::Dense(10));
  net.initialize(init::Xavier(), kGpu);
  net.hybridize();
  std::vector<NDArray> xs = inputs({2, 3, 16, 16}, 2, 2);
  test::first_call(net, xs[0]);
  graph_capture_reset_stats();
  test::expect_replay_matches(net, xs, 3);
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_EQ(s.captures, 1) << s.to_string();
  EXPECT_GE(s.replays, 4) << s.to_string();
}

TEST(CudaGraph, SyncLanesReplayMatchesToo) {
  KILN_REQUIRE_CUDA();
  engine::wait_all();
  const bool was_async = cuda::testing::lanes_async();
  cuda::testing::set_lanes_async(false);
  nd::random::seed(0);
  auto net = models::mlp_chapter();
  net.initialize(init::Xavier(), kGpu);
  net.hybridize();
  std::vector<NDArray> xs = inputs({1, 512}, 2, 3);
  test::first_call(net, xs[0]);
  graph_capture_reset_stats();
  test::expect_replay_matches(net, xs, 2);
  engine::wait_all();
  cuda::testing::set_lanes_async(was_async);
  EXPECT_EQ(graph_capture_stats().captures, 1) << graph_capture_stats().to_string();
}

// BatchNorm in training mode without recording updates its running
// statistics in place: replays must update them exactly as launches do.
TEST(CudaGraph, TrainModeForwardUpdatesRunningStatsAsLaunchesDo) {
  KILN_REQUIRE_CUDA();
  auto make = [] {
    nd::random::seed(5);
    nn::HybridSequential net;
    net.add(nn::Conv2D(4, 3, 1, 1), nn::BatchNorm(), nn::Activation("relu"), nn::Dense(3));
    net.initialize(init::Xavier(), kGpu);
    net.hybridize();
    return net;
  };
  std::vector<NDArray> xs = inputs({2, 3, 8, 8}, 3, 6);
  graph_capture_reset_stats();
  test::expect_same_with_and_without_graphs(
      [&](bool graphs) { return test::train_mode_values(make, kGpu, xs, graphs); });
  EXPECT_GE(graph_capture_stats().replays, 1) << graph_capture_stats().to_string();
}

// A training step: the forward and backward parts of the compiled step
// replayed, gradients equal to normal launches' bit for bit, step after step
// with new inputs.
TEST(CudaGraph, TrainingStepGradientsMatchBitForBit) {
  KILN_REQUIRE_CUDA();
  std::vector<NDArray> xs = inputs({4, 512}, 3, 7);
  graph_capture_reset_stats();
  test::expect_same_with_and_without_graphs(
      [&](bool graphs) { return test::mlp_training_values(kGpu, xs, graphs); });
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_GE(s.captures, 2) << "forward and backward: " << s.to_string();
  EXPECT_GE(s.replays, 2 * (3 * 3 - 2)) << s.to_string();
  EXPECT_EQ(s.total_fallbacks() - s.fallbacks[static_cast<int>(GraphFallback::kDisabled)], 0) << s.to_string();
}

// one_hot reads its indices back to the host: never captured, counted as such.
TEST(CudaGraph, AnOpThatReadsBackFallsBackWithItsReason) {
  KILN_REQUIRE_CUDA();
  nd::random::seed(0);
  test::OneHotNet net;
  net.initialize(init::Xavier(), kGpu);
  net.hybridize();
  std::vector<NDArray> xs = inputs({3, 4}, 2, 8);
  test::first_call(net, xs[0]);
  graph_capture_reset_stats();
  test::expect_replay_matches(net, xs, 2);
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_EQ(s.captures, 0) << s.to_string();
  EXPECT_EQ(fallbacks(GraphFallback::kUnsafeOp), 4) << s.to_string();
}

// softmax with lengths reads the lengths back inside a kernel that the
// static list cannot tell from plain softmax: the capture itself fails, the
// stream stays usable, the call runs normally, and later calls do not try
// again.
struct LengthSoftmaxNet : nn::HybridBlock {
  NDArray forward(const NDArray& x) override { return nd::softmax(x, nd::relu(nd::sum(x, {1})) + 1.0, 1); }
};

TEST(CudaGraph, AFailedCaptureFallsBackAndLeavesTheStreamUsable) {
  KILN_REQUIRE_CUDA();
  LengthSoftmaxNet net;
  net.hybridize();
  std::vector<NDArray> xs = inputs({3, 5}, 2, 9);
  test::first_call(net, xs[0]);
  graph_capture_reset_stats();
  test::expect_replay_matches(net, xs, 3);
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_EQ(s.captures, 0) << s.to_string();
  EXPECT_EQ(fallbacks(GraphFallback::kCaptureFailed), 3 * 2 - 1)
      << "one warm-up run, then fallbacks: " << s.to_string();
  // The stream works: plain ops after the failed capture.
  NDArray a = nd::ones({8}, {.device = kGpu}) + 1.0;
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(8, 2.0f));
}

// The softmax cross-entropy's label check reads nothing back: a loss inside
// the graph is captured, and a bad label in a replayed call surfaces at the
// next wait, naming the op and the graph. Column 3 of x holds the labels.
struct CrossEntropyNet : nn::HybridBlock {
  NDArray forward(const NDArray& x) override {
    return nd::softmax_cross_entropy(nd::slice_axis(x, 1, 0, 3), nd::reshape(nd::slice_axis(x, 1, 3, 4), {-1}));
  }
};

TEST(CudaGraph, CrossEntropyIsCapturedAndABadLabelSurfacesAtTheNextWait) {
  KILN_REQUIRE_CUDA();
  CrossEntropyNet net;
  net.hybridize();
  auto batch = [](float label) {
    std::vector<float> v = {0.5f, -1, 2, 0, 1, 1, 1, 2, 0.25f, 0, -3, label};
    return nd::array<float>(v, Shape{3, 4}, kGpu);
  };
  std::vector<NDArray> xs = {batch(1), batch(2)};
  test::first_call(net, xs[0]);
  graph_capture_reset_stats();
  test::expect_replay_matches(net, xs, 2);
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_EQ(s.captures, 1) << s.to_string();
  EXPECT_GE(s.replays, 2) << s.to_string();
  test::GraphsOn on(true);
  NDArray bad = net(batch(7));
  EXPECT_EQ(bad.shape(), (Shape{3}));
  // Asynchronous lanes: found at the wait; synchronous lanes: by the op that replayed the graph (the
  // engine keeps its error for wait_all).
  std::string msg = test::error_of<Error>([] { engine::wait_all(); });
  EXPECT_CONTAINS(msg, "_kiln_softmax_cross_entropy on cuda(0), in a CUDA graph: label 7 at position 2");
  engine::wait_all();  // reported once
  EXPECT_EQ(net(batch(0)).to_vector<float>().size(), 3u);
}

TEST(CudaGraph, SwitchOffRunsNormallyAndCountsIt) {
  KILN_REQUIRE_CUDA();
  nd::random::seed(0);
  auto net = models::mlp_chapter();
  net.initialize(init::Xavier(), kGpu);
  net.hybridize();
  NDArray x = inputs({1, 512}, 1, 10)[0];
  net(x).wait_to_read();
  graph_capture_reset_stats();
  test::GraphsOn off(false);
  for (int i = 0; i < 4; ++i) net(x).wait_to_read();
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_EQ(s.captures + s.replays, 0) << s.to_string();
  EXPECT_EQ(fallbacks(GraphFallback::kDisabled), 4) << s.to_string();
}

// Run with KILN_CUDA_GRAPHS=0 in the environment (ctest's
// cuda_graph_test_env_off does); skips otherwise.
TEST(CudaGraph, EnvironmentSwitchOff) {
  KILN_REQUIRE_CUDA();
  const char* env = std::getenv("KILN_CUDA_GRAPHS");
  if (env == nullptr || std::string_view(env) != "0") GTEST_SKIP() << "run with KILN_CUDA_GRAPHS=0";
  EXPECT_FALSE(graph_capture_enabled());
  nd::random::seed(0);
  auto net = models::mlp_chapter();
  net.initialize(init::Xavier(), kGpu);
  net.hybridize();
  NDArray x = inputs({1, 512}, 1, 11)[0];
  graph_capture_reset_stats();
  for (int i = 0; i < 3; ++i) net(x).wait_to_read();
  EXPECT_EQ(graph_capture_stats().captures, 0);
  EXPECT_EQ(fallbacks(GraphFallback::kDisabled), 3);
}

}  // namespace
}  // namespace kiln
