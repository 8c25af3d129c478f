// GraphExecutor: a traced graph run from a static plan as engine operations
// (one per call, or one per segment), its arena, its outputs written into
// given arrays or a block, and a training step's backward in segments.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <vector>

#include "frontend/cached_op.h"
#include "frontend/graph_executor.h"
#include "frontend/kiln.h"
#include "frontend/trace.h"
#include "models/zoo.h"
#include "runtime/engine.h"
#include "runtime/profiler.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using test::expect_close;

TEST(GraphExecutor, ExecutorReusesArenaStorage) {
  nn::HybridSequential net;
  for (int i = 0; i < 6; ++i) net.add(nn::Dense(64, "relu"));
  net.initialize();
  NDArray x = nd::ones({8, 64});
  NDArray want = net(x);
  TensorType type{x.shape(), x.dtype()};
  trace::TracedGraph traced = trace_block(net, {&type, 1}, Device::cpu(0), "net");
  GraphExecutor exec(std::make_shared<trace::TracedGraph>(std::move(traced)));
  expect_close(exec.run({&x, 1}, false)[0], want, 0, "executor");
  // 11 intermediates of 8x64 floats; at most two are live at once (one with
  // relu in place).
  EXPECT_EQ(exec.naive_bytes(), 11 * 8 * 64 * 4);
  EXPECT_LE(exec.arena_bytes(), 2 * 8 * 64 * 4);
  EXPECT_GE(exec.arena_bytes(), 8 * 64 * 4);
}

TEST(GraphExecutor, ExecutorWritesOutputsIntoGivenArraysOrIntoTheBlock) {
  nn::HybridSequential net;
  for (int i = 0; i < 3; ++i) net.add(nn::Dense(16, "relu"));
  net.initialize();
  NDArray x = nd::ones({4, 16});
  NDArray want = net(x);
  TensorType type{x.shape(), x.dtype()};
  auto traced = std::make_shared<trace::TracedGraph>(trace_block(net, {&type, 1}, Device::cpu(0), "net"));

  GraphExecutor exec(traced);
  NDArray into = nd::zeros({4, 16});
  std::vector<NDArray> dst{into};
  NDArray got = exec.run({&x, 1}, false, {.outputs_into = dst})[0];
  EXPECT_EQ(got.var(), into.var()) << "the output goes into the given array";
  expect_close(into, want, 0, "written into");
  std::vector<NDArray> wrong{nd::zeros({16, 4})};
  NDArray fresh = exec.run({&x, 1}, false, {.outputs_into = wrong})[0];
  EXPECT_NE(fresh.var(), wrong[0].var()) << "a shape that does not match gets a fresh array";
  expect_close(fresh, want, 0, "fresh");

  // The output into a block at offset 64: the run returns none for it.
  GraphExecutor::BlockLayout layout{.outputs = {64}, .bytes = 64 + 4 * 16 * 4};
  GraphExecutor to_block(traced, layout);
  NDArray block = NDArray::empty(Shape{layout.bytes}, {DType::kUint8, Device::cpu(0)});
  EXPECT_TRUE(to_block.run({&x, 1}, false, {.block = block})[0].is_none());
  block.wait_to_read();
  std::vector<float> in_block(4 * 16);
  std::memcpy(in_block.data(), static_cast<const char*>(block.data()) + 64, in_block.size() * sizeof(float));
  EXPECT_EQ(in_block, want.to_vector<float>());
  EXPECT_THROW(to_block.run({&x, 1}, false), InternalError) << "a layout with a block needs one";
}

struct Chain : nn::HybridBlock {
  std::vector<NDArray> forward(std::span<const NDArray> xs) override {
    NDArray a = xs[0] * 2;
    NDArray b = a + xs[1];
    return {a, b};
  }
};

// In segments, an output is ready once its segment has run: here the second
// segment waits for `gate`, written by an op on another device that holds it
// until the test lets go, yet the first output can be read meanwhile. As one
// engine operation the first output would wait for the gate too.
TEST(GraphExecutor, ExecutorSegmentsMakeEarlyOutputsReadyBeforeTheRest) {
  if (engine::get().kind() != engine::Kind::kThreaded) GTEST_SKIP() << "needs the threaded engine";
  Chain net;
  NDArray x = nd::array(std::vector<float>{1.f, 2.f});
  NDArray gate = nd::zeros({2});
  gate.wait_to_read();
  TensorType types[] = {{x.shape(), x.dtype()}, {gate.shape(), gate.dtype()}};
  auto traced = std::make_shared<trace::TracedGraph>(trace_block(net, types, Device::cpu(0), "chain"));
  GraphExecutor exec(traced);
  EXPECT_EQ(exec.num_segments(), 1);
  exec.split_into_segments(2);
  ASSERT_EQ(exec.num_segments(), 2);

  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  engine::get().push([released](engine::RunContext) { released.wait(); }, {}, {gate.var()},
                     {.device = Device::cpu(1), .name = "hold_gate"});
  NDArray args[] = {x, gate};
  std::vector<NDArray> y = exec.run(args, false);
  auto first = std::async(std::launch::async, [&] { return y[0].to_vector<float>(); });
  const bool ready = first.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  release.set_value();
  ASSERT_TRUE(ready) << "the first segment's output waited for the second segment's input";
  EXPECT_EQ(first.get(), (std::vector<float>{2.f, 4.f}));
  EXPECT_EQ(y[1].to_vector<float>(), (std::vector<float>{2.f, 4.f}));

  // More segments than cut points: one per output-writing step at most.
  exec.split_into_segments(16);
  EXPECT_EQ(exec.num_segments(), 2);
  exec.split_into_segments(1);
  EXPECT_EQ(exec.num_segments(), 1);
}

// Segments change which engine operations run the steps, not the steps:
// the outputs are bit for bit those of one operation.
struct Ladder : nn::HybridBlock {
  std::vector<NDArray> forward(std::span<const NDArray> xs) override {
    std::vector<NDArray> outs;
    NDArray h = xs[0];
    for (int i = 0; i < 6; ++i) {
      h = nd::tanh(nd::dot(h, xs[1]) + static_cast<float>(i));
      outs.push_back(h);
    }
    return outs;
  }
};

TEST(GraphExecutor, ExecutorInSegmentsGivesTheSameOutputs) {
  nd::random::seed(13);
  Ladder net;
  NDArray args[] = {nd::random::normal({8, 32}), nd::random::normal({32, 32})};
  TensorType types[] = {{args[0].shape(), args[0].dtype()}, {args[1].shape(), args[1].dtype()}};
  auto traced = std::make_shared<trace::TracedGraph>(trace_block(net, types, Device::cpu(0), "ladder"));
  GraphExecutor exec(traced);
  auto run = [&] {
    std::vector<std::vector<float>> v;
    for (const NDArray& y : exec.run(args, false)) v.push_back(y.to_vector<float>());
    return v;
  };
  const auto want = run();
  ASSERT_EQ(want.size(), 6u);
  for (int n : {2, 3, 64}) {
    exec.split_into_segments(n);
    EXPECT_EQ(exec.num_segments(), std::min(n, 6)) << n;
    EXPECT_EQ(run(), want) << n << " segments";
  }
}

// A compiled backward runs in segments (several engine operations) and
// gives imperative's gradients.
TEST(GraphExecutor, CompiledBackwardRunsInSegments) {
  nd::random::seed(12);
  auto net = models::make("lenet", 10);
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({4, 1, 28, 28});
  net(x).wait_to_read();
  auto grads = [&] {
    net.collect_params().zero_grad();
    {
      autograd::Record record;
      NDArray loss = nd::sum(nd::square(net(x)));
      autograd::backward({loss});
    }
    std::vector<std::vector<float>> g;
    for (auto& [name, p] : net.collect_params())
      if (p.grad_req() != GradReq::kNull) g.push_back(p.grad().to_vector<float>());
    return g;
  };
  net.hybridize();
  auto segmented = grads();  // KILN_BACKWARD_SEGMENTS unset: 8
  const bool was_on = profiler::enabled();
  if (!was_on) profiler::start();
  const size_t before = profiler::events().size();
  segmented = grads();
  engine::get().wait_all();
  const auto events = profiler::events();
  if (!was_on) profiler::stop();
  const auto cached_ops = std::count_if(events.begin() + static_cast<std::ptrdiff_t>(before), events.end(),
                                        [](const profiler::Event& e) { return e.name == "CachedOp"; });
  EXPECT_GE(cached_ops, 4) << "forward + backward segments";

  net.hybridize(false);
  auto eager = grads();
  ASSERT_EQ(eager.size(), segmented.size());
  for (size_t i = 0; i < eager.size(); ++i)
    for (size_t k = 0; k < eager[i].size(); ++k)
      ASSERT_NEAR(segmented[i][k], eager[i][k], 1e-4 * (1 + std::abs(eager[i][k]))) << "gradient " << i << "[" << k << "]";
}

}  // namespace
}  // namespace kiln
