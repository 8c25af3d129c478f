// The executor's side of device graphs (frontend/graph_executor.cc) on a
// machine without a GPU: in a build without CUDA, cuda(0) is served here by a
// fake backend whose kernels are the CPU's and whose "graphs" behave as CUDA
// graphs do. A capture runs nothing: each kernel call is recorded with the
// addresses it was given; a replay copies the bindings into the graph's
// staging buffers, runs the recorded calls on exactly those addresses, and
// copies the outputs back. So an executor that let a graph use memory that
// moves between calls (an input, a fresh output, a freed temporary) gets
// wrong numbers here, as it would on a GPU. Skips in builds with CUDA (the
// CUDA backend owns cuda(i) there; tests/cuda/cuda_graph_test.cc runs the
// real thing).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/kiln.h"
#include "models/zoo.h"
#include "runtime/device_backend.h"
#include "runtime/engine.h"
#include "runtime/graph_capture.h"
#include "runtime/kernel.h"
#include "tests/graph_replay_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

constexpr Device kFake = Device::cuda(0);

struct Call {
  KernelFn fn;
  OpAttrs attrs;
  bool is_train;
  OpId op;
  std::vector<TensorView> in, out;
};

thread_local std::vector<Call>* tl_recording = nullptr;
// An op whose kernel fails when run (not when recorded), to stand for a
// kernel fault; kNumOps: none.
std::atomic<int> g_failing_op{kNumOps};

// Every op's kernel on the fake device: the CPU's, or, while a capture
// records, a note of the call.
void fake_kernel(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  KernelFn cpu = find_kernel(op_def(ctx.op), Device::cpu(0));
  if (tl_recording != nullptr) {
    tl_recording->push_back({cpu, ctx.attrs, ctx.is_train, ctx.op, {in.begin(), in.end()}, {out.begin(), out.end()}});
    return;
  }
  if (static_cast<int>(ctx.op) == g_failing_op.load()) throw DeviceError("fake kernel fault");
  cpu(ctx, in, out);
}

class FakeGraph final : public CapturedGraph {
 public:
  FakeGraph(std::vector<GraphBinding> bindings, std::vector<std::vector<char>> staging, std::vector<Call> calls,
            int* replays, bool* fail_next)
      : bindings_(std::move(bindings)),
        staging_(std::move(staging)),
        calls_(std::move(calls)),
        replays_(replays),
        fail_next_(fail_next) {}
  void replay(const engine::RunContext& ctx, std::span<void* const> pointers) override {
    if (*fail_next_) {
      *fail_next_ = false;
      throw DeviceError("fake replay failure");
    }
    for (size_t i = 0; i < bindings_.size(); ++i)
      if (bindings_[i].copy_in) std::memcpy(staging_[i].data(), pointers[i], bindings_[i].bytes);
    for (const Call& c : calls_) {
      KernelContext kc{ctx, c.attrs, c.is_train, c.op};
      c.fn(kc, c.in, c.out);
    }
    for (size_t i = 0; i < bindings_.size(); ++i)
      if (bindings_[i].copy_out) std::memcpy(pointers[i], staging_[i].data(), bindings_[i].bytes);
    ++*replays_;
  }
  size_t num_nodes() const override { return calls_.size(); }

 private:
  std::vector<GraphBinding> bindings_;
  std::vector<std::vector<char>> staging_;
  std::vector<Call> calls_;
  int* replays_;
  bool* fail_next_;
};

class FakeCapture final : public GraphCapture {
 public:
  bool op_capturable(OpId op) override { return op != OpId::kOneHot; }
  void synchronize(const engine::RunContext&) override {}
  CaptureResult capture(const engine::RunContext&, std::span<const GraphBinding> bindings, std::span<void* const>,
                        const std::string& label, const std::function<void(std::span<void* const>)>& body) override {
    labels.push_back(label);
    if (fail_next_capture) {
      fail_next_capture = false;
      return {nullptr, GraphFallback::kCaptureFailed, "fake capture failure"};
    }
    std::vector<std::vector<char>> staging;
    std::vector<void*> ptrs;
    for (const GraphBinding& b : bindings) {
      staging.emplace_back(b.bytes, '\x7f');  // garbage until copied in or written
      ptrs.push_back(staging.back().data());
    }
    std::vector<Call> calls;
    tl_recording = &calls;
    try {
      body(ptrs);
    } catch (...) {
      tl_recording = nullptr;
      throw;
    }
    tl_recording = nullptr;
    return {std::make_unique<FakeGraph>(std::vector<GraphBinding>(bindings.begin(), bindings.end()), std::move(staging),
                                        std::move(calls), &replays, &fail_next_replay),
            std::nullopt,
            {}};
  }
  int replays = 0;
  bool fail_next_capture = false;
  bool fail_next_replay = false;
  std::vector<std::string> labels;
};

class FakeBackend final : public DeviceBackend {
 public:
  int device_count() override { return 1; }
  std::string description() override { return "fake cuda(0)"; }
  std::unique_ptr<storage::Pool> make_pool(Device device) override { return storage::make_host_pool(device); }
  void run(engine::Fn& fn, engine::RunContext ctx) override { fn(ctx); }
  void drain() override {}
  void copy(void* dst, Device, const void* src, Device, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void register_kernels() override {}
  GraphCapture* graph_capture() override { return &capture; }
  FakeCapture capture;
};

// The fake backend, registered once per process (null in builds with CUDA).
FakeBackend* fake() {
  static FakeBackend* const backend = []() -> FakeBackend* {
    if (find_device_backend(DeviceKind::kCUDA) != nullptr) return nullptr;
    (void)find_kernel(op_def(OpId::kExp), Device::cpu(0));  // the table is filled first
    for (int op = 0; op < kNumOps; ++op)
      if (has_kernel(static_cast<OpId>(op), DeviceKind::kCPU))
        register_kernel(static_cast<OpId>(op), DeviceKind::kCUDA, &fake_kernel);
    auto owned = std::make_unique<FakeBackend>();
    FakeBackend* b = owned.get();
    register_device_backend(DeviceKind::kCUDA, std::move(owned));
    return b;
  }();
  return backend;
}

#define REQUIRE_FAKE()                                                                                     \
  do {                                                                                                     \
    if (fake() == nullptr) GTEST_SKIP() << "built with CUDA: tests/cuda/cuda_graph_test.cc covers graphs"; \
  } while (0)

std::vector<NDArray> inputs(const Shape& shape, int n, uint64_t seed) {
  return test::inputs_on(kFake, shape, n, seed);
}

TEST(GraphExecutorCapture, MlpReplaysMatchLaunchesAndFollowNewInputs) {
  REQUIRE_FAKE();
  nd::random::seed(0);
  auto net = models::mlp_chapter();
  net.initialize(init::Xavier(), kFake);
  net.hybridize();
  std::vector<NDArray> xs = inputs({1, 512}, 3, 1);
  test::first_call(net, xs[0]);
  graph_capture_reset_stats();
  const int replays_before = fake()->capture.replays;
  test::expect_replay_matches(net, xs, 3);
  engine::wait_all();
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_EQ(s.captures, 1) << s.to_string();
  EXPECT_EQ(s.warmups, 1) << s.to_string();
  EXPECT_EQ(s.replays, 8) << s.to_string();
  EXPECT_EQ(fake()->capture.replays - replays_before, 8);
  EXPECT_EQ(s.fallbacks[static_cast<int>(GraphFallback::kDisabled)], 3) << s.to_string();
  ASSERT_FALSE(fake()->capture.labels.empty());
  EXPECT_NE(fake()->capture.labels.back().find("(predict, float32[1,512] on cuda(0))"), std::string::npos)
      << fake()->capture.labels.back();
}

TEST(GraphExecutorCapture, CnnAndTrainModeForwardMatch) {
  REQUIRE_FAKE();
  auto make = [] {
    nd::random::seed(5);
    nn::HybridSequential net;
    net.add(nn::Conv2D(4, 3, 1, 1), nn::BatchNorm(), nn::Activation("relu"), nn::MaxPool2D(2), nn::Dense(3));
    net.initialize(init::Xavier(), kFake);
    net.hybridize();
    return net;
  };
  std::vector<NDArray> xs = inputs({2, 3, 8, 8}, 2, 6);
  {
    auto net = make();
    test::first_call(net, xs[0]);
    test::expect_replay_matches(net, xs, 3);
  }
  // Train mode without recording: BatchNorm's running statistics are
  // updated in place by every replay, as by launches.
  graph_capture_reset_stats();
  test::expect_same_with_and_without_graphs(
      [&](bool graphs) { return test::train_mode_values(make, kFake, xs, graphs); });
  EXPECT_EQ(graph_capture_stats().replays, 3 * 2 - 1) << graph_capture_stats().to_string();
}

TEST(GraphExecutorCapture, TrainingStepGradientsMatch) {
  REQUIRE_FAKE();
  std::vector<NDArray> xs = inputs({4, 512}, 3, 7);
  graph_capture_reset_stats();
  test::expect_same_with_and_without_graphs(
      [&](bool graphs) { return test::mlp_training_values(kFake, xs, graphs); });
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_GE(s.captures, 2) << s.to_string();
  EXPECT_GE(s.replays, 2 * 7) << s.to_string();
  EXPECT_EQ(s.total_fallbacks() - s.fallbacks[static_cast<int>(GraphFallback::kDisabled)], 0) << s.to_string();
}

TEST(GraphExecutorCapture, UnsafeOpsAndFailedCapturesFallBackWithTheirReason) {
  REQUIRE_FAKE();
  nd::random::seed(0);
  test::OneHotNet net;
  net.initialize(init::Xavier(), kFake);
  net.hybridize();
  std::vector<NDArray> xs = inputs({3, 4}, 2, 8);
  test::first_call(net, xs[0]);
  graph_capture_reset_stats();
  test::expect_replay_matches(net, xs, 2);
  EXPECT_EQ(graph_capture_stats().fallbacks[static_cast<int>(GraphFallback::kUnsafeOp)], 4);
  EXPECT_EQ(graph_capture_stats().captures, 0);

  auto mlp = models::mlp_chapter();
  mlp.initialize(init::Xavier(), kFake);
  mlp.hybridize();
  std::vector<NDArray> ys = inputs({1, 512}, 2, 9);
  test::first_call(mlp, ys[0]);
  graph_capture_reset_stats();
  fake()->capture.fail_next_capture = true;
  test::expect_replay_matches(mlp, ys, 3);
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_EQ(s.captures, 0) << s.to_string();
  EXPECT_EQ(s.fallbacks[static_cast<int>(GraphFallback::kCaptureFailed)], 3 * 2 - 1) << s.to_string();
}

TEST(GraphExecutorCapture, AFailedReplayNamesTheGraphAndLaterCallsRunNormally) {
  REQUIRE_FAKE();
  nd::random::seed(0);
  auto net = models::mlp_chapter();
  net.initialize(init::Xavier(), kFake);
  net.hybridize();
  std::vector<NDArray> xs = inputs({1, 512}, 1, 10);
  test::first_call(net, xs[0]);
  std::vector<float> want;
  {
    test::GraphsOn off(false);
    want = net(xs[0]).to_vector<float>();
  }
  test::GraphsOn on(true);
  net(xs[0]).wait_to_read();  // warm-up run
  graph_capture_reset_stats();
  fake()->capture.fail_next_replay = true;
  std::string msg = test::error_of<Error>([&] { net(xs[0]).wait_to_read(); });
  EXPECT_NE(msg.find("fake replay failure"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a step-by-step rerun did not fail"), std::string::npos) << msg;
  EXPECT_EQ(net(xs[0]).to_vector<float>(), want);
  GraphCaptureStats s = graph_capture_stats();
  EXPECT_EQ(s.fallbacks[static_cast<int>(GraphFallback::kReplayFailed)], 2) << s.to_string();
}

// A replay that fails while the device still works: the steps rerun one by
// one, and the failing node is named.
TEST(GraphExecutorCapture, AFailedReplayFindsTheNodeByRerunningStepByStep) {
  REQUIRE_FAKE();
  nd::random::seed(0);
  auto net = models::mlp_chapter();
  net.initialize(init::Xavier(), kFake);
  net.hybridize();
  NDArray x = inputs({1, 512}, 1, 12)[0];
  test::first_call(net, x);
  test::GraphsOn on(true);
  net(x).wait_to_read();  // warm-up run
  net(x).wait_to_read();  // captured and replayed
  fake()->capture.fail_next_replay = true;
  g_failing_op = static_cast<int>(OpId::kFullyConnected);
  std::string msg = test::error_of<Error>([&] { net(x).wait_to_read(); });
  g_failing_op = kNumOps;
  EXPECT_NE(msg.find("fake kernel fault"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(FullyConnected) of HybridSequential (predict, float32[1,512] on cuda(0))"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace kiln
