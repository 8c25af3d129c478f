// gradient: the backward graph built from each op's GradFn computes what
// eager autograd computes and what finite differences measure.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

#include "frontend/autograd.h"
#include "passes/gradient.h"
#include "tests/passes/eval_graph.h"
#include "tests/passes/random_graph.h"

namespace kiln::passes {
namespace {

using testing::Bindings;
using testing::eval_graph;

const char* kMlp = R"IR(graph {
  %x = input f64[4,5]
  %label = input f64[4]
  %w1 = param f64[8,5]
  %b1 = param f64[8]
  %w2 = param f64[3,8]
  %b2 = param f64[3]
  %fc1 = FullyConnected(%x, %w1, %b1) {num_hidden="8"} : f64[4,8]
  %act = Activation(%fc1) {act_type="tanh"} : f64[4,8]
  %fc2 = FullyConnected(%act, %w2, %b2) {num_hidden="3"} : f64[4,3]
  %loss = _kiln_softmax_cross_entropy(%fc2, %label) : f64[4]
  return %loss
})IR";

const char* kConvNet = R"IR(graph {
  %x = input f32[2,3,6,6]
  %cw = param f32[4,3,3,3]
  %cb = param f32[4]
  %conv = Convolution(%x, %cw, %cb) {kernel="(3, 3)", num_filter="4", pad="(1, 1)"} : f32[2,4,6,6]
  %relu = Activation(%conv) {act_type="relu"} : f32[2,4,6,6]
  %pool = Pooling(%relu) {kernel="(2, 2)", stride="(2, 2)"} : f32[2,4,3,3]
  %flat = Flatten(%pool) : f32[2,36]
  %fw = param f32[5,36]
  %fc = FullyConnected(%flat, %fw) {no_bias="True", num_hidden="5"} : f32[2,5]
  return %fc
})IR";

const char* kBroadcast = R"IR(graph {
  %x = input f64[2,3]
  %w = param f64[3]
  %b = param f64[1,3]
  %y = broadcast_mul(%x, %w) : f64[2,3]
  %z = broadcast_sub(%y, %b) : f64[2,3]
  %s = sum(%x) {axis="(1,)", keepdims="True"} : f64[2,1]
  %t = broadcast_add(%z, %s) : f64[2,3]
  %sq = square(%t) : f64[2,3]
  %out = sum(%sq) {axis="(1,)"} : f64[2]
  return %out
})IR";

// One value (%a) feeds several ops, an intermediate is also an output, and a
// multi-output op has unused outputs (their gradients are zeros).
const char* kShared = R"IR(graph {
  %x = input f64[2,3]
  %w = param f64[3]
  %unused = param f64[2]
  %a = tanh(%x) : f64[2,3]
  %b = broadcast_mul(%a, %w) : f64[2,3]
  %c = exp(%a) : f64[2,3]
  %d = elemwise_mul(%b, %c) : f64[2,3]
  %e = elemwise_add(%d, %a) : f64[2,3]
  %p = SliceChannel(%e) {num_outputs="3"} : f64[2,1], f64[2,1], f64[2,1]
  return %e, %a, %p#1
})IR";

// Mode-dependent ops with effects and several outputs: BatchNorm (train
// mode: batch statistics, running statistics updated in place) and Dropout
// (a fixed seed, so eager and graph draw the same mask).
const char* kBatchNormDropout = R"IR(graph {
  %x = input f32[2,3,4,4]
  %gamma = param f32[3]
  %beta = param f32[3]
  %mean = aux f32[3]
  %var = aux f32[3]
  %bn = BatchNorm(%x, %gamma, %beta, %mean, %var) {fix_gamma="False"} : f32[2,3,4,4], f32[3], f32[3]
  %act = Activation(%bn) {act_type="tanh"} : f32[2,3,4,4]
  %drop = Dropout(%act) {seed="5"} : f32[2,3,4,4], f32[2,3,4,4]
  %flat = Flatten(%drop) : f32[2,48]
  %w = param f32[3,48]
  %fc = FullyConnected(%flat, %w) {no_bias="True", num_hidden="3"} : f32[2,3]
  return %fc
})IR";

// LayerNorm returning `returned`: its mean and std unread (%ln), or its std
// read too (%ln, %ln#2).
std::string layer_norm_graph(const char* returned) {
  return fmt::format(R"IR(graph {{
  %x = input f64[4,5]
  %gamma = param f64[5]
  %beta = param f64[5]
  %ln = LayerNorm(%x, %gamma, %beta) {{eps="0.01"}} : f64[4,5], f64[4,1], f64[4,1]
  return {}
}})IR",
                     returned);
}
const std::string kLayerNorm = layer_norm_graph("%ln");
const std::string kLayerNormStd = layer_norm_graph("%ln, %ln#2");

// Bindings for the forward inputs plus random head gradients.
Bindings bindings_for(const ir::Graph& fwd, uint32_t seed) {
  Bindings b = testing::random_bindings(fwd, seed);
  if (fwd.find("label")) b["label"] = nd::array(std::vector<double>{0, 2, 1, 2}, Shape{4});
  std::mt19937 gen(seed + 100);
  std::uniform_real_distribution<double> dist(0.5, 1.5);
  for (size_t i = 0; i < fwd.outputs().size(); ++i) {
    const TensorType& t = fwd.type(fwd.outputs()[i]);
    std::vector<double> v(static_cast<size_t>(t.shape.size()));
    for (double& x : v) x = dist(gen);
    b[head_grad_name(fwd, i)] = nd::array(v, t.shape).astype(t.dtype);
  }
  return b;
}

// Gradients from the gradient graph, one per `wrt` name.
// Runs in train mode, as eager autograd's forward and backward do.
std::vector<NDArray> graph_grads(const ir::Graph& fwd, const std::vector<std::string>& wrt, const Bindings& b) {
  ir::Graph g = build_gradient_graph(fwd, wrt);
  ir::verify(g);
  autograd::TrainMode train;
  auto outs = eval_graph(g, b);
  EXPECT_EQ(outs.size(), fwd.outputs().size() + wrt.size());
  return {outs.begin() + static_cast<std::ptrdiff_t>(fwd.outputs().size()), outs.end()};
}

// The same gradients from eager autograd running the forward graph.
std::vector<NDArray> eager_grads(const ir::Graph& fwd, const std::vector<std::string>& wrt, const Bindings& b) {
  Bindings leaves;
  for (const auto& [name, v] : b) leaves[name] = v.copy();
  for (const std::string& name : wrt) leaves[name].attach_grad();
  std::vector<NDArray> outs, heads;
  {
    autograd::Record record;
    outs = eval_graph(fwd, leaves);
  }
  for (size_t i = 0; i < fwd.outputs().size(); ++i) heads.push_back(b.at(head_grad_name(fwd, i)));
  autograd::backward(outs, heads);
  std::vector<NDArray> grads;
  for (const std::string& name : wrt) grads.push_back(leaves[name].grad());
  return grads;
}

// Central differences of sum_i sum(output_i * head_i) for each element of each `wrt` array.
void expect_finite_differences(const ir::Graph& fwd, const std::vector<std::string>& wrt, const Bindings& b,
                               const std::vector<NDArray>& grads) {
  auto objective = [&](const Bindings& at) {
    auto outs = eval_graph(fwd, at);
    double total = 0;
    for (size_t i = 0; i < outs.size(); ++i) {
      auto y = outs[i].astype(DType::kFloat64).to_vector<double>();
      auto h = b.at(head_grad_name(fwd, i)).astype(DType::kFloat64).to_vector<double>();
      for (size_t k = 0; k < y.size(); ++k) total += y[k] * h[k];
    }
    return total;
  };
  const double eps = 1e-6;
  for (size_t w = 0; w < wrt.size(); ++w) {
    const NDArray& base = b.at(wrt[w]);
    std::vector<double> v = base.to_vector<double>();
    std::vector<double> analytic = grads[w].to_vector<double>();
    ASSERT_EQ(analytic.size(), v.size());
    for (size_t k = 0; k < v.size(); ++k) {
      auto at = [&](double delta) {
        Bindings p = b;
        std::vector<double> pv = v;
        pv[k] += delta;
        p[wrt[w]] = nd::array(pv, base.shape());
        return objective(p);
      };
      double numeric = (at(eps) - at(-eps)) / (2 * eps);
      ASSERT_NEAR(analytic[k], numeric, 1e-6 + 1e-5 * std::fabs(numeric)) << wrt[w] << " element " << k;
    }
  }
}

struct Case {
  const char* name;
  const char* text;
  std::vector<std::string> wrt;
  double rtol;
  bool finite_differences;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

class GradientCases : public ::testing::TestWithParam<Case> {};

TEST_P(GradientCases, MatchesEagerAutogradAndFiniteDifferences) {
  const Case& c = GetParam();
  ir::Graph fwd = ir::parse_graph(c.text);
  Bindings b = bindings_for(fwd, 7);
  std::vector<NDArray> mine = graph_grads(fwd, c.wrt, b);
  std::vector<NDArray> eager = eager_grads(fwd, c.wrt, b);
  for (size_t i = 0; i < c.wrt.size(); ++i) {
    SCOPED_TRACE(c.wrt[i]);
    testing::expect_all_close({mine[i]}, {eager[i]}, c.rtol, c.rtol * 1e-2, c.name);
  }
  if (c.finite_differences) expect_finite_differences(fwd, c.wrt, b, mine);
}

INSTANTIATE_TEST_SUITE_P(
    Graphs, GradientCases,
    ::testing::Values(Case{"mlp", kMlp, {"w1", "b1", "w2", "b2", "x"}, 1e-10, true},
                      Case{"conv", kConvNet, {"cw", "cb", "fw", "x"}, 1e-4, false},
                      Case{"broadcast", kBroadcast, {"x", "w", "b"}, 1e-10, true},
                      Case{"shared", kShared, {"w", "x"}, 1e-10, true},
                      Case{"batchnorm_dropout", kBatchNormDropout, {"gamma", "beta", "w", "x"}, 1e-4, false},
                      Case{"layer_norm", kLayerNorm.c_str(), {"x", "gamma", "beta"}, 1e-10, true},
                      Case{"layer_norm_std", kLayerNormStd.c_str(), {"x", "gamma", "beta"}, 1e-10, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(Gradient, BeforeAfterText) {
  const char* before = R"IR(graph {
  %x = input f64[2,3]
  %w = param f64[2,3]
  %y = elemwise_mul(%x, %w) : f64[2,3]
  %z = exp(%y) : f64[2,3]
  return %z
}
)IR";
  ir::Graph g = build_gradient_graph(ir::parse_graph(before), std::vector<std::string>{"w"});
  // d/dw exp(x*w) . h = x * (exp(x*w) * h)
  const char* after = R"IR(graph {
  %x = input f64[2,3]
  %w = param f64[2,3]
  %y = elemwise_mul(%x, %w) : f64[2,3]
  %z = exp(%y) : f64[2,3]
  %z_grad = input f64[2,3]
  %z_grad/elemwise_mul = elemwise_mul(%z_grad, %z) : f64[2,3]
  %y_grad/elemwise_mul = elemwise_mul(%z_grad/elemwise_mul, %x) : f64[2,3]
  return %z, %y_grad/elemwise_mul
}
)IR";
  EXPECT_EQ(g.to_text(), after);
}

// Outputs nothing reads hand a none gradient to a GradFn that takes one
// (OpDef::grad_takes_none_out_grads): no zeros, and no terms computed from
// them. LayerNorm's unread mean and std cost four broadcast ops per layer
// when they were zeros.
TEST(Gradient, UnreadOutputsAddNoZerosWhereTheGradientTakesNone) {
  auto ops_of = [](const std::string& text) {
    std::string out = build_gradient_graph(ir::parse_graph(text), std::vector<std::string>{"x", "gamma"}).to_text();
    return std::make_pair(out.find("_zeros") != std::string::npos, out.find("broadcast_") != std::string::npos);
  };
  EXPECT_EQ(ops_of(kLayerNorm), std::make_pair(false, false));
  // std read: its term is there, mean's (unread) is not zeros.
  auto [zeros, broadcasts] = ops_of(kLayerNormStd);
  EXPECT_FALSE(zeros);
  EXPECT_TRUE(broadcasts);
}

TEST(Gradient, NoPathGivesZerosAndRequestedOrderIsKept) {
  ir::Graph fwd = ir::parse_graph(kShared);
  Bindings b = bindings_for(fwd, 3);
  std::vector<std::string> wrt{"unused", "w", "unused"};
  ir::Graph g = build_gradient_graph(fwd, wrt);
  auto outs = eval_graph(g, b);
  ASSERT_EQ(outs.size(), 6u);
  for (size_t i : {3u, 5u}) {
    EXPECT_EQ(outs[i].shape(), (Shape{2}));
    for (double v : outs[i].to_vector<double>()) EXPECT_EQ(v, 0);
  }
  EXPECT_EQ(outs[4].shape(), (Shape{3}));
  // The forward outputs are unchanged.
  testing::expect_all_close({outs[0], outs[1], outs[2]}, eval_graph(fwd, b), 0, 0);
}

TEST(Gradient, ErrorsNameTheNode) {
  ir::Graph fwd = ir::parse_graph(kShared);
  try {
    build_gradient_graph(fwd, std::vector<std::string>{"nope"});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
  }
  try {
    build_gradient_graph(fwd, std::vector<std::string>{"c"});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'c' is an op node (exp)"), std::string::npos) << e.what();
  }
}

TEST(Gradient, PipelineDefaultsToEveryParamAndSurvivesCleanup) {
  ir::Graph fwd = ir::parse_graph(kMlp);
  PassContext raw_ctx(PassOptions{});
  ir::Graph raw = run_pass("gradient", fwd, raw_ctx);
  EXPECT_EQ(raw.outputs().size(), 5u);  // loss, then w1 b1 w2 b2
  EXPECT_GT(raw_ctx.stats.back().added, 0);
  PassContext ctx(PassOptions{});
  ir::Graph opt = run_pipeline(fwd, "gradient,eliminate-common-expr,eliminate-dead-code,plan-memory", ctx);
  Bindings b = bindings_for(fwd, 11);
  testing::expect_all_close(eval_graph(opt, b), eval_graph(raw, b), 1e-12, 1e-14);
  testing::expect_all_close(
      eval_graph(raw, b),
      [&] {
        auto g = eager_grads(fwd, {"w1", "b1", "w2", "b2"}, b);
        g.insert(g.begin(), eval_graph(fwd, b)[0]);
        return g;
      }(),
      1e-10, 1e-12);
  EXPECT_LT(ctx.memory_plan->arena_bytes, ctx.memory_plan->naive_bytes) << ctx.report();
}

TEST(Gradient, GradientOfAGradientGraphIsTheSecondDerivative) {
  ir::Graph fwd = ir::parse_graph(R"IR(graph {
  %x = input f64[4]
  %sq = elemwise_mul(%x, %x) : f64[4]
  %y = elemwise_mul(%sq, %x) : f64[4]
  return %y
})IR");
  ir::Graph first = build_gradient_graph(fwd, std::vector<std::string>{"x"});  // y, dy/dx . h = 3x^2 h
  ir::Graph second = build_gradient_graph(first, std::vector<std::string>{"x"});
  ASSERT_EQ(second.outputs().size(), 3u);
  std::vector<double> x{-1.5, 0.5, 1, 2};
  Bindings b{{"x", nd::array(x, Shape{4})},
             {"y_grad", nd::ones({4}, {.dtype = DType::kFloat64})},
             {head_grad_name(first, 0), nd::zeros({4}, {.dtype = DType::kFloat64})},
             {head_grad_name(first, 1), nd::ones({4}, {.dtype = DType::kFloat64})}};
  auto outs = eval_graph(second, b);
  auto dx = outs[1].to_vector<double>();
  auto ddx = outs[2].to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(dx[i], 3 * x[i] * x[i], 1e-12);
    EXPECT_NEAR(ddx[i], 6 * x[i], 1e-12);
  }
}

TEST(Gradient, RandomGraphsMatchEagerAutogradBeforeAndAfterCleanup) {
  for (uint32_t seed = 1; seed <= 25; ++seed) {
    SCOPED_TRACE(fmt::format("seed {}", seed));
    ir::Graph fwd = testing::random_graph(seed, 20, true);
    std::vector<std::string> wrt{"x", "y"};
    for (ir::NodeId id : fwd.nodes_of_kind(ir::NodeKind::kParam)) wrt.push_back(fwd.node(id).name);
    Bindings b = bindings_for(fwd, seed);
    std::vector<NDArray> mine = graph_grads(fwd, wrt, b);
    testing::expect_all_close(mine, eager_grads(fwd, wrt, b), 1e-10, 1e-12);
    // The cleaned-up training graph computes the same outputs and gradients.
    PassOptions opts;
    opts.gradient.wrt = wrt;
    PassContext ctx(opts);
    ir::Graph raw = build_gradient_graph(fwd, wrt);
    ir::Graph clean = run_pipeline(
        fwd, "gradient,simplify-algebra,fold-constants,eliminate-common-expr,eliminate-dead-code,plan-memory", ctx);
    EXPECT_LE(clean.num_ops(), raw.num_ops());
    testing::expect_all_close(eval_graph(clean, b), eval_graph(raw, b), 1e-12, 1e-14);
  }
}

}  // namespace
}  // namespace kiln::passes
