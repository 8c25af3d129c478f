// hybridize(): tracing, the CachedOp, and imperative vs compiled agreement.
#include <gtest/gtest.h>

#include "tests/frontend/hybrid_net.h"
#include "tests/test_util.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/autograd_tape.h"
#include "frontend/cached_op.h"
#include "frontend/check_hybridize.h"
#include "frontend/graph_executor.h"
#include "frontend/kiln.h"
#include "frontend/nn/symbol_block.h"
#include "frontend/trace.h"
#include "models/zoo.h"
#include "passes/memory_plan.h"
#include "runtime/engine.h"
#include "runtime/profiler.h"
#include "runtime/storage.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_close;
using test::HybridNet;

TEST(Hybridize, MlpAgreesAndTracesOncePerSignature) {
  nd::random::seed(1);
  auto net = models::mlp_chapter();
  net.initialize();
  NDArray x = nd::random::normal({4, 512});
  NDArray imperative = net(x);
  net.hybridize();
  NDArray first = net(x);
  NDArray second = net(x);
  expect_close(first, imperative, 0, "first hybridized call");
  expect_close(second, imperative, 0, "second hybridized call");
  ASSERT_NE(net.cached_op(), nullptr);
  EXPECT_EQ(net.cached_op()->num_traces(), 1);

  NDArray y = nd::random::normal({2, 512});
  net(y).wait_to_read();
  EXPECT_EQ(net.cached_op()->num_traces(), 2);
  auto log = net.cached_op()->retrace_log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_CONTAINS(log[0], "input 0 shape [4,512] -> [2,512]");
  net(x).wait_to_read();  // both signatures stay cached
  EXPECT_EQ(net.cached_op()->num_traces(), 2);
}

TEST(Hybridize, GraphHasParamsUnderStructuralNames) {
  HybridNet net;
  net.initialize();
  net.hybridize();
  net(nd::ones({2, 5})).wait_to_read();
  auto g = net.cached_op()->last_graph();
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->params.size(), 4u);
  EXPECT_TRUE(g->graph.find("hidden.weight").has_value()) << g->graph.to_text();
  EXPECT_TRUE(g->graph.find("output.bias").has_value()) << g->graph.to_text();
  EXPECT_EQ(g->graph.num_ops(), 2);  // _kiln_fc_act (FullyConnected + relu, fused), FullyConnected
  ir::verify(g->graph);
}

TEST(Hybridize, DeferredInitializationOnTheFirstHybridizedCall) {
  HybridNet net;
  net.initialize();
  net.hybridize();
  NDArray y = net(nd::ones({2, 7}));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(net.hidden.collect_params().at("weight").shape(), (Shape{16, 7}));
  net.hybridize(false);
  expect_close(net(nd::ones({2, 7})), y, 0, "imperative after hybridized");
}

TEST(Hybridize, GradientsMatchImperative) {
  nd::random::seed(2);
  HybridNet net;
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({8, 6});
  auto grads_of = [&] {
    net.collect_params().zero_grad();
    {
      autograd::Record record;
      NDArray loss = nd::sum(nd::square(net(x)));
      autograd::backward({loss});
    }
    std::vector<NDArray> g;
    for (auto& [name, p] : net.collect_params()) g.push_back(p.grad().copy());
    return g;
  };
  auto imperative = grads_of();
  net.hybridize();
  auto hybrid = grads_of();
  ASSERT_EQ(imperative.size(), hybrid.size());
  for (size_t i = 0; i < hybrid.size(); ++i) expect_close(hybrid[i], imperative[i], 1e-6, "gradient " + std::to_string(i));
}

// A detached branch: its value is used, no gradient flows through it.
struct DetachNet : nn::HybridBlock {
  nn::Dense a{4}, b{4};
  DetachNet() {
    register_child("a", a);
    register_child("b", b);
  }
  NDArray forward(const NDArray& x) override {
    NDArray h = a(x);
    return b(h) * h.detach();
  }
};

TEST(Hybridize, DetachStopsTheCompiledGradientLikeTheImperativeOne) {
  nd::random::seed(3);
  DetachNet net;
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({5, 6});
  auto grads_of = [&] {
    net.collect_params().zero_grad();
    {
      autograd::Record record;
      NDArray loss = nd::sum(nd::square(net(x)));
      autograd::backward({loss});
    }
    return std::vector<NDArray>{net.a.weight().grad().copy(), net.b.weight().grad().copy()};
  };
  auto imperative = grads_of();
  net.hybridize();
  auto hybrid = grads_of();
  expect_close(hybrid[0], imperative[0], 1e-6, "a.weight gradient");
  expect_close(hybrid[1], imperative[1], 1e-6, "b.weight gradient");
  // The graph holds the stop: a BlockGrad node (exported under MXNet's name).
  const ir::Graph& g = net.cached_op()->last_graph()->graph;
  EXPECT_TRUE(std::any_of(g.nodes().begin(), g.nodes().end(),
                          [](const ir::Node& n) { return n.is_op() && n.op == OpId::kBlockGrad; }));
  // And the stop matters: without it a.weight's gradient differs.
  net.collect_params().zero_grad();
  {
    autograd::Record record;
    NDArray h = net.a(x);
    autograd::backward({nd::sum(nd::square(net.b(h) * h))});
  }
  auto full = net.a.weight().grad().to_vector<double>(), stopped = imperative[0].to_vector<double>();
  double diff = 0;
  for (size_t i = 0; i < full.size(); ++i) diff += std::abs(full[i] - stopped[i]);
  EXPECT_GT(diff, 1e-3);
}

TEST(Hybridize, ModeIsPartOfTheKeyBatchNormAndDropout) {
  nd::random::seed(3);
  nn::HybridSequential net;
  net.add(nn::Dense(8), nn::BatchNorm(), nn::Dropout(0.5));
  net.initialize();
  NDArray x = nd::random::normal({16, 4});
  NDArray want = net(x);  // imperative, predict mode (running statistics unchanged)
  net.hybridize();
  NDArray predict = net(x);
  NDArray train_a, train_b;
  {
    autograd::Record record;  // train mode
    train_a = net(x);
    train_b = net(x);
  }
  EXPECT_EQ(net.cached_op()->num_traces(), 2);
  EXPECT_CONTAINS(net.cached_op()->retrace_log().at(0), "mode predict -> train");
  // Dropout draws a new mask per call: the two training outputs differ.
  auto a = train_a.to_vector<float>(), b = train_b.to_vector<float>();
  int zeros_a = 0, differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    zeros_a += a[i] == 0;
    differ += a[i] != b[i];
  }
  EXPECT_GT(zeros_a, 16);
  EXPECT_GT(differ, 16);
  // Predict mode equals the imperative predict output.
  expect_close(predict, want, 1e-6, "predict mode");
}

TEST(Hybridize, BatchNormRunningStatsUpdateLikeImperative) {
  nd::random::seed(4);
  auto make = [] {
    nn::HybridSequential net;
    net.add(nn::Dense(6), nn::BatchNorm());
    net.initialize(init::One());
    return net;
  };
  NDArray x = nd::random::normal({10, 3});
  auto imperative = make(), hybrid = make();
  hybrid.hybridize();
  for (int step = 0; step < 3; ++step) {
    autograd::Record record;
    imperative(x);
    hybrid(x);
  }
  auto pi = imperative.collect_params(".*running_mean"), ph = hybrid.collect_params(".*running_mean");
  ASSERT_EQ(pi.size(), 1u);
  expect_close(ph.at(ph.names()[0]).data(), pi.at(pi.names()[0]).data(), 1e-6, "running_mean");
}

// A whole training step (forward and backward, where the compiled backward
// recomputes some BatchNorm outputs) moves every running statistic of
// ResNet-18 exactly as the imperative step does: once per forward.
TEST(Hybridize, TrainingStepUpdatesEveryRunningStatOnceLikeImperative) {
  nd::random::seed(14);
  auto make = [] {
    auto net = models::make("resnet18", 10);
    net.initialize(init::Xavier());
    return net;
  };
  NDArray x = nd::random::normal({4, 1, 28, 28});
  auto imperative = make(), hybrid = make();
  imperative(x).wait_to_read();
  hybrid(x).wait_to_read();
  for (auto& [name, p] : hybrid.collect_params()) p.data().assign(imperative.collect_params().at(name).data());
  hybrid.hybridize();
  for (int step = 0; step < 2; ++step) {
    for (auto* net : {&imperative, &hybrid}) {
      autograd::Record record;
      NDArray loss = nd::sum(nd::square((*net)(x)));
      autograd::backward({loss});
    }
  }
  auto pi = imperative.collect_params(".*running_(mean|var)");
  ASSERT_GE(pi.size(), 20u);
  for (const auto& name : pi.names())
    expect_close(hybrid.collect_params().at(name).data(), pi.at(name).data(), 1e-4, name);
}

struct ReadsAValue : nn::HybridBlock {
  NDArray forward(const NDArray& x) override {
    if (nd::sum(x).item<float>() > 0) return x * 2;  // data-dependent: not traceable
    return x;
  }
};

TEST(Hybridize, ReadingAValueWhileTracingNamesTheBlock) {
  ReadsAValue net;
  net.hybridize();
  std::string msg = error_of<ValueError>([&] { net(nd::ones({2, 2})); });
  EXPECT_CONTAINS(msg, "ReadsAValue");
  EXPECT_CONTAINS(msg, "item");
  EXPECT_CONTAINS(msg, "hybridize");
  EXPECT_EQ(trace::current(), nullptr);  // the failed trace was unwound
  net.hybridize(false);
  expect_close(net(nd::ones({2, 2})), nd::full({2, 2}, 2.0), 0, "imperative still works");
}

struct Leaky : nn::HybridBlock {
  NDArray* keep;
  explicit Leaky(NDArray* k) : keep(k) {}
  NDArray forward(const NDArray& x) override {
    *keep = x + 1;
    return *keep;
  }
};

TEST(Hybridize, SymbolicArraysDoNotEscape) {
  NDArray kept;
  Leaky net(&kept);
  net.hybridize();
  net(nd::ones({3})).wait_to_read();
  ASSERT_TRUE(kept.is_symbolic());
  EXPECT_CONTAINS(error_of<ValueError>([&] { kept.to_vector<float>(); }), "finished trace");
  EXPECT_CONTAINS(error_of<ValueError>([&] { (kept + 1).wait_to_read(); }), "finished trace");
}

struct Outer : nn::Block {  // not hybrid: its hybrid child stays compiled
  HybridNet inner;
  Outer() { register_child("inner", inner); }
  NDArray forward(const NDArray& x) override { return inner(x) * 2; }
};

TEST(Hybridize, NonHybridParentKeepsHybridChildrenCompiled) {
  Outer net;
  net.initialize();
  NDArray x = nd::ones({2, 4});
  NDArray imperative = net(x);
  net.hybridize();
  expect_close(net(x), imperative, 0, "outer");
  ASSERT_NE(net.inner.cached_op(), nullptr);
  EXPECT_EQ(net.inner.cached_op()->num_traces(), 1);
}

TEST(Hybridize, NestedHybridChildrenAreInlinedIntoTheParentGraph) {
  nn::HybridSequential net;
  HybridNet a;
  net.add(a, nn::Dense(2));
  net.initialize();
  net.hybridize();
  net(nd::ones({1, 4})).wait_to_read();
  ASSERT_NE(a.cached_op(), nullptr);
  EXPECT_EQ(a.cached_op()->num_traces(), 0);  // traced as part of the parent
  EXPECT_EQ(net.cached_op()->last_graph()->graph.num_ops(), 3);  // FullyConnected + relu fused
}

// A chain of elementwise ops: the inference executor and the compiled
// training step run it as fused nodes (fuse-elementwise), with the results
// of the op-by-op path.
struct ElementwiseChain : nn::HybridBlock {
  NDArray forward(const NDArray& x) override { return nd::relu(x * 2 + 1) * nd::sigmoid(x) - nd::tanh(x); }
};

TEST(Hybridize, ElementwiseChainsRunFused) {
  ElementwiseChain net;
  NDArray x = nd::random::normal({3, 1000});
  x.attach_grad();
  NDArray imperative = net(x);
  NDArray dx_imperative;
  {
    autograd::Record record;
    NDArray loss = nd::sum(nd::square(net(x)));
    autograd::backward({loss});
  }
  dx_imperative = x.grad().copy();
  net.hybridize();
  expect_close(net(x), imperative, 1e-6, "fused inference");
  EXPECT_CONTAINS(net.cached_op()->pass_report(), "fused");
  {
    autograd::Record record;
    NDArray loss = nd::sum(nd::square(net(x)));
    autograd::backward({loss});
  }
  expect_close(x.grad(), dx_imperative, 1e-5, "fused training step, gradient");
}

struct WithConstant : nn::HybridBlock {
  NDArray offset = nd::full({3}, 5.0);
  NDArray forward(const NDArray& x) override {
    NDArray y = x * 2;
    y += offset;  // in-place on a symbolic value, with a captured constant
    return y + nd::ones({3});
  }
};

TEST(Hybridize, ConstantsAndInPlaceFormsAreTraced) {
  WithConstant net;
  NDArray x = nd::array(std::vector<float>{1.f, 2.f, 3.f});
  NDArray imperative = net(x);
  net.hybridize();
  expect_close(net(x), imperative, 0, "with constant");
  auto g = net.cached_op()->last_graph();
  EXPECT_EQ(g->consts.size(), 1u);

  // Export writes the captured constant as a parameter (arg:const0); the
  // imported model needs no code and gives the same output.
  auto dir = std::filesystem::temp_directory_path() / "kiln_hybridize_const";
  std::filesystem::create_directories(dir);
  auto [json, params] = net.export_model((dir / "withconst").string());
  auto back = nn::SymbolBlock::imports(json, {"data"}, params);
  expect_close(back(x), imperative, 0, "exported and imported, with constant");
  std::filesystem::remove_all(dir);
}

TEST(Hybridize, ConcurrentCallsFromThreads) {
  nd::random::seed(5);
  auto net = models::mlp_chapter();
  net.initialize();
  NDArray x = nd::random::normal({3, 512});
  NDArray want = net(x);
  net.hybridize();
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> got(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      NDArray y;
      for (int i = 0; i < 20; ++i) y = net(x);
      got[static_cast<size_t>(t)] = y.to_vector<float>();
    });
  }
  for (auto& th : threads) th.join();
  auto w = want.to_vector<float>();
  for (auto& g : got) EXPECT_EQ(g, w);
  EXPECT_EQ(net.cached_op()->num_traces(), 1);
}

struct CountsCalls : nn::HybridBlock {  // C++ state the trace freezes
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  NDArray forward(const NDArray& x) override { return x * static_cast<double>(++*calls); }
};

TEST(Hybridize, CheckHybridizeAgreesOnModelsAndNamesWhatDiffers) {
  nd::random::seed(9);
  auto net = models::lenet();
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({2, 1, 28, 28});
  EXPECT_EQ(check_hybridize(net, {&x, 1}), std::nullopt);

  CountsCalls counter;
  NDArray y = nd::ones({3});
  auto report = check_hybridize(counter, {&y, 1});
  ASSERT_TRUE(report.has_value());
  EXPECT_CONTAINS(*report, "output 0");
  EXPECT_CONTAINS(*report, "imperative 2");

  // The node-by-node comparison names the first differing node.
  ir::Graph g;
  ir::Entry in = g.add_input("data", {Shape{2}, DType::kFloat32});
  ir::Entry a = g.add_op(OpId::kRelu, {}, {&in, 1}, "first")[0];
  g.add_op(OpId::kExp, {}, {&a, 1}, "second");
  std::vector<NDArray> good{nd::ones({2}), nd::ones({2}), nd::ones({2})};
  std::vector<NDArray> bad{nd::ones({2}), nd::ones({2}), nd::array(std::vector<float>{1.f, 1.5f})};
  EXPECT_EQ(first_mismatch(g, good, good, 1e-6), std::nullopt);
  auto m = first_mismatch(g, bad, good, 1e-6);
  ASSERT_TRUE(m.has_value());
  EXPECT_CONTAINS(*m, "node 'second' (exp) output 0");
  EXPECT_CONTAINS(*m, "at [1]");
}

struct AddsNoise : nn::HybridBlock {
  NDArray forward(const NDArray& x) override { return x + nd::random::normal(x.shape()); }
};

TEST(Hybridize, RandomOpsDrawNewValuesEveryCall) {
  AddsNoise net;
  net.hybridize();
  NDArray x = nd::zeros({256});
  for (bool record : {false, true}) {
    NDArray a, b;
    {
      std::optional<autograd::Record> scope;
      if (record) scope.emplace();
      a = net(x);
      b = net(x);
    }
    auto va = a.to_vector<float>(), vb = b.to_vector<float>();
    int same = 0;
    double mean = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      same += va[i] == vb[i];
      mean += va[i] / static_cast<double>(va.size());
    }
    EXPECT_LT(same, 5) << (record ? "recording" : "predict") << ": two calls drew the same values";
    EXPECT_NEAR(mean, 0, 0.3);
  }
}

struct TwoOutputs : nn::HybridBlock {
  std::vector<NDArray> forward(std::span<const NDArray> xs) override {
    NDArray a = nd::relu(xs[0] + xs[1]);
    NDArray b = a * 3;  // `a` is an output and read again
    return {a, b, xs[0]};  // an input returned as is
  }
};

TEST(Hybridize, CompiledGraphOutputsReadAgainAndInputsPassedTwice) {
  TwoOutputs net;
  NDArray x = nd::array(std::vector<float>{-1.f, 2.f});
  NDArray args[] = {x, x};
  auto want = net(std::span<const NDArray>(args));
  net.hybridize();
  for (int i = 0; i < 2; ++i) {
    auto got = net(std::span<const NDArray>(args));
    ASSERT_EQ(got.size(), 3u);
    for (size_t k = 0; k < 3; ++k) expect_close(got[k], want[k], 0, "output " + std::to_string(k));
  }
}

struct ConstantBranch : nn::HybridBlock {
  std::vector<NDArray> forward(std::span<const NDArray> xs) override {
    NDArray bias = nd::exp(nd::zeros({4})) * 2;  // a constant: 2 everywhere
    return {xs[0] + bias};
  }
};

// The pipeline folds what depends only on uniform constants: the compiled
// graph computes `bias` at compile time (one _full node), not per call.
TEST(Hybridize, PipelineFoldsUniformConstants) {
  ConstantBranch net;
  NDArray x = nd::array(std::vector<float>{1.f, 2.f, 3.f, 4.f});
  NDArray want = net(std::span<const NDArray>(&x, 1))[0];
  net.hybridize();
  NDArray got = net(std::span<const NDArray>(&x, 1))[0];
  expect_close(got, want, 1e-6, "folded");
  auto graph = net.cached_op()->last_graph();
  ASSERT_NE(graph, nullptr);
  int64_t exps = 0, fulls = 0;
  for (const ir::Node& n : graph->graph.nodes()) {
    if (!n.is_op()) continue;
    exps += n.op == OpId::kExp;
    fulls += n.op == OpId::kFull;
  }
  EXPECT_EQ(exps, 0) << graph->graph.to_text();
  EXPECT_EQ(fulls, 1) << graph->graph.to_text();
}

// Every zoo model: hybridized agrees with imperative in predict mode and in
// train mode (forward and parameter gradients).
class ZooHybridize : public testing::TestWithParam<std::string> {};

TEST_P(ZooHybridize, ForwardAndGradientsAgree) {
  const std::string name = GetParam();
  nd::random::seed(6);
  auto net = models::make(name, 10);
  net.initialize(init::Xavier());
  Shape in = name.rfind("mlp_", 0) == 0 ? Shape{2, 512} : name == "resnet18_v1" ? Shape{2, 3, 32, 32} : Shape{2, 1, 28, 28};
  NDArray x = nd::random::normal(in);
  auto run = [&](bool hybrid) {
    net.hybridize(hybrid);
    std::vector<NDArray> results;
    results.push_back(net(x).copy());
    net.collect_params().zero_grad();
    {
      autograd::Record record;
      NDArray loss = nd::sum(nd::square(net(x)));
      autograd::backward({loss});
    }
    for (auto& [pname, p] : net.collect_params())
      if (p.grad_req() != GradReq::kNull) results.push_back(p.grad().copy());
    return results;
  };
  // Train-mode BatchNorm updates running statistics: restore them between runs.
  net(x).wait_to_read();  // completes deferred shapes
  EXPECT_EQ(check_hybridize(net, {&x, 1}), std::nullopt);  // node by node, predict mode
  std::vector<NDArray> saved;
  for (auto& [pname, p] : net.collect_params()) saved.push_back(p.data().copy());
  auto restore = [&] {
    size_t i = 0;
    for (auto& [pname, p] : net.collect_params()) p.data().assign(saved[i++]);
  };
  auto imperative = run(false);
  restore();
  auto hybrid = run(true);
  ASSERT_EQ(imperative.size(), hybrid.size());
  for (size_t i = 0; i < hybrid.size(); ++i)
    expect_close(hybrid[i], imperative[i], 1e-5, name + (i == 0 ? " output" : " gradient " + std::to_string(i)));

  // Exported, then imported without the model's code: the same predictions,
  // and load_parameters reads the exported params back.
  restore();
  NDArray predicted = net(x);
  std::string prefix = testing::TempDir() + "kiln_zoo_" + name;
  auto [json, params] = net.export_model(prefix);
  auto imported = nn::SymbolBlock::imports(json, {"data"}, params);
  expect_close(imported(x), predicted, 1e-5, name + " exported and imported");
  net.load_parameters(params);
  expect_close(net(x), predicted, 0, name + " load_parameters of the export");
  std::filesystem::remove(json);
  std::filesystem::remove(params);
}

INSTANTIATE_TEST_SUITE_P(Models, ZooHybridize,
                         testing::Values("mlp", "mlp_chapter", "lenet", "resnet18", "resnet18_v1"));

}  // namespace
}  // namespace kiln
