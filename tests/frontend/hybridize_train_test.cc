// The compiled training step of hybridize(): one tape node per call, the
// gradient routes, the saved values' block, back-pressure, retain_graph and
// Dropout masks (the forward-only and agreement cases: hybridize_test.cc).
#include <gtest/gtest.h>

#include "tests/frontend/hybrid_net.h"
#include "tests/test_util.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/autograd_tape.h"
#include "frontend/cached_op.h"
#include "frontend/graph_executor.h"
#include "frontend/kiln.h"
#include "passes/memory_plan.h"
#include "runtime/engine.h"
#include "runtime/profiler.h"
#include "runtime/storage.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_close;
using test::HybridNet;

TEST(Hybridize, TrainingRecordsOneTapeNodeAndRoutesInputAndAddGradients) {
  nd::random::seed(7);
  HybridNet net;
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({5, 6});
  // Imperative reference: input gradient and twice-accumulated parameter gradients.
  auto grads = [&](bool hybrid) {
    net.hybridize(hybrid);
    net.collect_params().set_grad_req(GradReq::kAdd);
    net.collect_params().zero_grad();
    NDArray xi = x.copy();
    xi.attach_grad();
    for (int step = 0; step < 2; ++step) {
      autograd::Record record;
      NDArray y = net(xi);
      if (hybrid) {
        EXPECT_NE(y.ag_node(), nullptr);
        EXPECT_TRUE(y.ag_node()->custom) << "a hybridized call is one tape node";
      }
      autograd::backward({nd::sum(y * y)});
    }
    std::vector<NDArray> g{xi.grad().copy()};
    for (auto& [name, p] : net.collect_params()) g.push_back(p.grad().copy());
    return g;
  };
  auto imperative = grads(false);
  auto hybrid = grads(true);
  for (size_t i = 0; i < hybrid.size(); ++i) expect_close(hybrid[i], imperative[i], 1e-5, "gradient " + std::to_string(i));
}

// A custom tape node (what a hybridized call records) that doubles its
// input's gradient; records which gradient buffers backward offered it.
std::vector<NDArray> doubling_node(std::span<const NDArray> inputs, std::vector<bool>& offered) {
  auto node = std::make_shared<autograd::detail::Node>();
  node->custom = true;
  for (const NDArray& x : inputs) {
    node->inputs.push_back({x.ag_node(), x.ag_index()});
    node->input_types.push_back({x.shape(), x.dtype()});
    node->output_types.push_back({x.shape(), x.dtype()});
  }
  node->custom_backward = [&offered](std::span<const NDArray> out_grads,
                                     const autograd::detail::CustomBackwardArgs& args) {
    std::vector<NDArray> grads;
    offered.assign(out_grads.size(), false);
    for (size_t k = 0; k < out_grads.size(); ++k) {
      NDArray g = out_grads[k] * 2.0;
      if (k < args.into.size() && !args.into[k].is_none()) {
        offered[k] = true;
        NDArray into = args.into[k];
        into.assign(g);
        g = into;
      }
      grads.push_back(g);
    }
    return grads;
  };
  std::vector<NDArray> outputs;
  for (size_t k = 0; k < inputs.size(); ++k) {
    outputs.push_back(inputs[k].detach() * 1.0);
    outputs.back().set_ag_entry(node, static_cast<int>(k));
  }
  return outputs;
}

TEST(Hybridize, BackwardOffersACustomNodeTheBuffersOfWriteLeavesOnlyItReaches) {
  NDArray w = nd::ones({3}), v = nd::ones({3}), u = nd::ones({3});
  w.attach_grad();
  v.attach_grad(GradReq::kAdd);
  u.attach_grad();
  std::vector<bool> offered;
  NDArray loss;
  {
    autograd::Record record;
    auto y = doubling_node(std::vector<NDArray>{w, v, u}, offered);
    loss = nd::sum(y[0]) + nd::sum(y[1]) + nd::sum(y[2]) + nd::sum(u);
  }
  NDArray w_grad_buffer = w.grad();
  autograd::backward({loss});
  EXPECT_EQ(offered, (std::vector<bool>{true, false, false})) << "v adds, u has a second gradient";
  EXPECT_EQ(w.grad().var(), w_grad_buffer.var());
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(3, 2.0f));
  EXPECT_EQ(v.grad().to_vector<float>(), std::vector<float>(3, 2.0f));
  EXPECT_EQ(u.grad().to_vector<float>(), std::vector<float>(3, 3.0f));

  // autograd::grad returns gradients and leaves the buffers alone: nothing offered.
  {
    autograd::Record record;
    auto y = doubling_node(std::vector<NDArray>{w}, offered);
    loss = nd::sum(y[0]);
  }
  w.grad().assign(7.0);
  auto g = autograd::grad(std::vector<NDArray>{loss}, std::vector<NDArray>{w});
  EXPECT_EQ(offered, std::vector<bool>{false});
  EXPECT_EQ(g[0].to_vector<float>(), std::vector<float>(3, 2.0f));
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(3, 7.0f));
}

// A small network with BatchNorm and a residual add: the training step saves
// several values, so the per-call block is not trivial.
struct ResidualNet : nn::HybridBlock {
  nn::Dense a{12}, b{12};
  nn::BatchNorm bn;
  ResidualNet() {
    register_child("a", a);
    register_child("b", b);
    register_child("bn", bn);
  }
  NDArray forward(const NDArray& x) override {
    NDArray h = nd::relu(bn(a(x)));
    return nd::tanh(b(h) + h) * h;
  }
};

std::vector<NDArray> param_grads(nn::Block& net) {
  std::vector<NDArray> g;
  for (auto& [name, p] : net.collect_params())
    if (p.grad_req() != GradReq::kNull) g.push_back(p.grad().copy());
  return g;
}

TEST(Hybridize, SavedValuesLieInOneBlockThatBackwardReuses) {
  nd::random::seed(9);
  ResidualNet net;
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({16, 8});
  auto grads = [&](bool hybrid) {
    net.hybridize(hybrid);
    NDArray loss;
    {
      autograd::Record record;
      loss = nd::sum(nd::square(net(x)));
    }
    autograd::backward({loss});
    return param_grads(net);
  };
  net(x).wait_to_read();
  std::vector<NDArray> saved_params;
  for (auto& [name, p] : net.collect_params()) saved_params.push_back(p.data().copy());
  auto imperative = grads(false);
  size_t i = 0;
  for (auto& [name, p] : net.collect_params()) p.data().assign(saved_params[i++]);
  auto hybrid = grads(true);
  for (size_t k = 0; k < hybrid.size(); ++k) expect_close(hybrid[k], imperative[k], 1e-5, "gradient " + std::to_string(k));
  auto memory = net.cached_op()->train_memory();
  ASSERT_TRUE(memory.has_value());
  EXPECT_GT(memory->num_saved, 2);
  EXPECT_GT(memory->block, 0);
  EXPECT_LE(memory->block, memory->saved + memory->num_saved * passes::MemoryPlan::kAlignment);
}

// The per-call block of saved values is memory the queued forward and
// backward hold: back-pressure must count it, or a training loop that never
// reads a value runs ahead and allocates one block per step (session 5: the
// chapter's ResNet-18 run grew to 22 GiB and was killed).
TEST(Hybridize, BackPressureCountsTheSavedValuesBlock) {
  if (engine::get().kind() != engine::Kind::kThreaded) GTEST_SKIP() << "back-pressure needs the threaded engine";
  nd::random::seed(3);
  nn::HybridSequential net;
  net.add(nn::Dense(512, "relu"), nn::Dense(512, "tanh"), nn::Dense(4));
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({256, 64});
  net.hybridize();
  auto step = [&] {
    NDArray loss;
    {
      autograd::Record record;
      loss = nd::sum(nd::square(net(x)));
    }
    autograd::backward({loss});
  };
  step();
  engine::get().wait_all();
  const int64_t block = net.cached_op()->train_memory()->block;
  ASSERT_GE(block, 1 << 20);
  storage::Pool& pool = storage::pool(Device::cpu(0));
  const int64_t before = pool.stats().in_use;
  pool.reset_peak();
  // Hold the device for a while so the loop below runs ahead of it.
  engine::get().push([](engine::RunContext) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); },
                     {}, {x.var()}, {.device = Device::cpu(0), .name = "hold"});
  constexpr int kSteps = 60;
  for (int i = 0; i < kSteps; ++i) step();
  engine::get().wait_all();
  const int64_t grown = pool.stats().peak_in_use - before;
  EXPECT_LT(grown, 16 * block) << "the loop ran " << grown / block << " blocks of " << block
                               << " bytes ahead of the engine";
}

// Backward consumes a call's block: with retain_graph it must run on a copy,
// and two calls recorded before either backward must keep separate blocks.
TEST(Hybridize, CompiledBackwardTwiceWithRetainGraphAndInterleavedCalls) {
  nd::random::seed(10);
  ResidualNet net;
  net.initialize(init::Xavier());
  NDArray x1 = nd::random::normal({16, 8}), x2 = nd::random::normal({16, 8});
  net(x1).wait_to_read();
  std::vector<NDArray> saved_params;
  for (auto& [name, p] : net.collect_params()) saved_params.push_back(p.data().copy());
  auto restore = [&] {
    size_t i = 0;
    for (auto& [name, p] : net.collect_params()) p.data().assign(saved_params[i++]);
  };
  // Reference: imperative gradients of each call alone.
  auto alone = [&](const NDArray& x) {
    restore();
    NDArray loss;
    {
      autograd::Record record;
      loss = nd::sum(nd::square(net(x)));
    }
    autograd::backward({loss});
    return param_grads(net);
  };
  auto want1 = alone(x1), want2 = alone(x2);

  net.hybridize();
  restore();
  NDArray l1, l2;
  {
    autograd::Record record;
    l1 = nd::sum(nd::square(net(x1)));
  }
  // BatchNorm's running statistics moved; the gradients do not read them.
  {
    autograd::Record record;
    l2 = nd::sum(nd::square(net(x2)));
  }
  autograd::backward(std::vector<NDArray>{l2}, {}, autograd::BackwardOptions{.retain_graph = true});
  auto got2 = param_grads(net);
  autograd::backward({l1});
  auto got1 = param_grads(net);
  autograd::backward({l2});  // the retained tape: its block was left intact
  auto again2 = param_grads(net);
  for (size_t k = 0; k < want1.size(); ++k) {
    expect_close(got1[k], want1[k], 1e-5, "call 1, gradient " + std::to_string(k));
    expect_close(got2[k], want2[k], 1e-5, "call 2, gradient " + std::to_string(k));
    expect_close(again2[k], want2[k], 1e-5, "call 2 again, gradient " + std::to_string(k));
  }
}

TEST(Hybridize, CompiledDropoutGradientUsesTheCallsMask) {
  nd::random::seed(8);
  nn::HybridSequential net;
  net.add(nn::Dropout(0.5));
  net.initialize();
  net.hybridize();
  NDArray x = nd::random::uniform({64}, 1, 2);
  x.attach_grad();
  for (int call = 0; call < 2; ++call) {
    NDArray y, total;
    {
      autograd::Record record;
      y = net(x);
      total = nd::sum(y);
    }
    EXPECT_TRUE(y.ag_node()->custom);
    autograd::backward({total});
    auto yv = y.to_vector<float>(), xv = x.to_vector<float>(), gv = x.grad().to_vector<float>();
    int dropped = 0;
    for (size_t i = 0; i < yv.size(); ++i) {
      ASSERT_NEAR(gv[i] * xv[i], yv[i], 1e-5) << "call " << call << " element " << i;  // dy/dx is the mask
      dropped += yv[i] == 0;
    }
    EXPECT_GT(dropped, 10);
    EXPECT_LT(dropped, 54);
  }
}

}  // namespace
}  // namespace kiln
