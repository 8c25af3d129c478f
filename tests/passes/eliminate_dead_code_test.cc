// eliminate-dead-code: Before/After graphs, effects kept, and random graphs
// that compute the same outputs before and after.
#include <gtest/gtest.h>

#include "passes/eliminate_dead_code.h"
#include "tests/passes/eval_graph.h"
#include "tests/passes/random_graph.h"

namespace kiln::passes {
namespace {

ir::Graph run(const ir::Graph& g, PassOptions options = {}) {
  PassContext ctx(std::move(options));
  return run_pass("eliminate-dead-code", g, ctx);
}

TEST(EliminateDeadCode, DropsUnreachableOps) {
  const char* before = R"IR(graph {
  %x = input f64[2,3]
  %w = param f64[3]
  %a = exp(%x) : f64[2,3]
  %b = tanh(%a) : f64[2,3]
  %c = negative(%b) : f64[2,3]
  %d = broadcast_mul(%a, %w) : f64[2,3]
  return %d, %a
}
)IR";
  const char* after = R"IR(graph {
  %x = input f64[2,3]
  %w = param f64[3]
  %a = exp(%x) : f64[2,3]
  %d = broadcast_mul(%a, %w) : f64[2,3]
  return %d, %a
}
)IR";
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pass("eliminate-dead-code", ir::parse_graph(before), ctx);
  EXPECT_EQ(out.to_text(), after);
  EXPECT_EQ(ctx.stats.back().removed, 2);
  EXPECT_TRUE(ctx.stats.back().changed);
}

TEST(EliminateDeadCode, UnchangedGraphIsReportedUnchanged) {
  const char* text = R"IR(graph {
  %x = input f64[2]
  %y = exp(%x) : f64[2]
  return %y
}
)IR";
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pass("eliminate-dead-code", ir::parse_graph(text), ctx);
  EXPECT_EQ(out.to_text(), text);
  EXPECT_FALSE(ctx.stats.back().changed);
  EXPECT_EQ(ctx.stats.back().removed, 0);
}

TEST(EliminateDeadCode, KeepsInputsUnlessAskedAndMultiOutputNodes) {
  const char* before = R"IR(graph {
  %x = input f64[2,4]
  %unused_in = input f64[5]
  %unused_w = param f64[5]
  %parts = SliceChannel(%x) {num_outputs="2"} : f64[2,2], f64[2,2]
  %y = exp(%parts#1) : f64[2,2]
  %z = exp(%unused_in) : f64[5]
  return %y
}
)IR";
  ir::Graph out = run(ir::parse_graph(before));
  EXPECT_TRUE(out.find("unused_in") && out.find("unused_w") && out.find("parts"));
  EXPECT_FALSE(out.find("z"));
  PassOptions opts;
  opts.dead_code.remove_unused_inputs = true;
  const char* after = R"IR(graph {
  %x = input f64[2,4]
  %parts = SliceChannel(%x) {num_outputs="2"} : f64[2,2], f64[2,2]
  %y = exp(%parts#1) : f64[2,2]
  return %y
}
)IR";
  EXPECT_EQ(run(ir::parse_graph(before), opts).to_text(), after);
}

TEST(EliminateDeadCode, KeepsOpsWithEffects) {
  // BatchNorm writes its moving statistics in training even when its outputs are unused.
  const char* before = R"IR(graph {
  %x = input f32[2,3,4,4]
  %gamma = param f32[3]
  %beta = param f32[3]
  %mean = aux f32[3]
  %var = aux f32[3]
  %bn = BatchNorm(%x, %gamma, %beta, %mean, %var) : f32[2,3,4,4], f32[3], f32[3]
  %y = exp(%x) : f32[2,3,4,4]
  return %y
}
)IR";
  ir::Graph out = run(ir::parse_graph(before));
  EXPECT_TRUE(out.find("bn").has_value()) << out.to_text();
  EXPECT_EQ(out.to_text(), before);
}

TEST(EliminateDeadCode, RandomGraphsComputeTheSameOutputs) {
  int removed = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    ir::Graph g = testing::random_graph(seed);
    PassContext ctx(PassOptions{});
    ir::Graph out = run_pass("eliminate-dead-code", g, ctx);
    removed += static_cast<int>(ctx.stats.back().removed);
    EXPECT_EQ(out.outputs().size(), g.outputs().size());
    // Every op left reaches an output.
    PassContext again_ctx(PassOptions{});
    EXPECT_EQ(run_pass("eliminate-dead-code", out, again_ctx).to_text(), out.to_text()) << "seed " << seed;
    auto bind = testing::random_bindings(g, seed);
    testing::expect_all_close(testing::eval_graph(g, bind), testing::eval_graph(out, bind), 0, 0,
                              fmt::format("seed {}", seed));
  }
  EXPECT_GT(removed, 0) << "the random graphs should contain dead code";
}

}  // namespace
}  // namespace kiln::passes
