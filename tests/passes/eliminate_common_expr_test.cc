// eliminate-common-expr: Before/After graphs, impure ops kept apart, and random
// graphs that compute the same outputs before and after.
#include <gtest/gtest.h>

#include "passes/eliminate_common_expr.h"
#include "passes/op_effects.h"
#include "tests/passes/eval_graph.h"
#include "tests/passes/random_graph.h"

namespace kiln::passes {
namespace {

std::string cse(const char* text, int64_t* merged = nullptr) {
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pass("eliminate-common-expr", ir::parse_graph(text), ctx);
  if (merged) *merged = ctx.stats.back().merged;
  return out.to_text();
}

TEST(EliminateCommonExpr, MergesEqualSubexpressionsTransitively) {
  const char* before = R"IR(graph {
  %x = input f64[2,3]
  %a = exp(%x) : f64[2,3]
  %b = exp(%x) : f64[2,3]
  %c = _mul_scalar(%a) {scalar="2"} : f64[2,3]
  %d = _mul_scalar(%b) {scalar="2"} : f64[2,3]
  %e = _mul_scalar(%b) {scalar="3"} : f64[2,3]
  %f = elemwise_add(%c, %d) : f64[2,3]
  return %f, %d, %e
}
)IR";
  const char* after = R"IR(graph {
  %x = input f64[2,3]
  %a = exp(%x) : f64[2,3]
  %c = _mul_scalar(%a) {scalar="2"} : f64[2,3]
  %e = _mul_scalar(%a) {scalar="3"} : f64[2,3]
  %f = elemwise_add(%c, %c) : f64[2,3]
  return %f, %c, %e
}
)IR";
  int64_t merged = 0;
  EXPECT_EQ(cse(before, &merged), after);
  EXPECT_EQ(merged, 2);
}

TEST(EliminateCommonExpr, InputOrderAndOutputIndexMatter) {
  const char* text = R"IR(graph {
  %x = input f64[2,4]
  %y = input f64[2,4]
  %a = elemwise_sub(%x, %y) : f64[2,4]
  %b = elemwise_sub(%y, %x) : f64[2,4]
  %p = SliceChannel(%x) {num_outputs="2"} : f64[2,2], f64[2,2]
  %q = SliceChannel(%x) {num_outputs="2"} : f64[2,2], f64[2,2]
  %s = elemwise_sub(%p#0, %q#1) : f64[2,2]
  %t = elemwise_sub(%p#1, %q#0) : f64[2,2]
  return %a, %b, %s, %t
}
)IR";
  std::string out = cse(text);
  EXPECT_NE(out.find("%b = elemwise_sub(%y, %x)"), std::string::npos) << out;
  EXPECT_EQ(out.find("%q ="), std::string::npos) << out;
  EXPECT_NE(out.find("%s = elemwise_sub(%p, %p#1)"), std::string::npos) << out;
  EXPECT_NE(out.find("%t = elemwise_sub(%p#1, %p)"), std::string::npos) << out;
}

TEST(EliminateCommonExpr, CommutativeOpsMergeInEitherOrder) {
  const char* before = R"IR(graph {
  %x = input f64[2,3]
  %w = param f64[3]
  %a = broadcast_mul(%x, %w) : f64[2,3]
  %b = broadcast_mul(%w, %x) : f64[2,3]
  %c = elemwise_add(%a, %x) : f64[2,3]
  %d = elemwise_add(%x, %b) : f64[2,3]
  %e = broadcast_sub(%w, %x) : f64[2,3]
  %f = broadcast_sub(%x, %w) : f64[2,3]
  return %c, %d, %e, %f
}
)IR";
  const char* after = R"IR(graph {
  %x = input f64[2,3]
  %w = param f64[3]
  %a = broadcast_mul(%x, %w) : f64[2,3]
  %c = elemwise_add(%a, %x) : f64[2,3]
  %e = broadcast_sub(%w, %x) : f64[2,3]
  %f = broadcast_sub(%x, %w) : f64[2,3]
  return %c, %c, %e, %f
}
)IR";
  int64_t merged = 0;
  EXPECT_EQ(cse(before, &merged), after);
  EXPECT_EQ(merged, 2);
}

TEST(EliminateCommonExpr, NeverMergesRandomOpsOrEffects) {
  const char* text = R"IR(graph {
  %x = input f32[2,3,4,4]
  %gamma = param f32[3]
  %beta = param f32[3]
  %mean = aux f32[3]
  %var = aux f32[3]
  %r1 = _random_uniform() {shape="(2, 3, 4, 4)"} : f32[2,3,4,4]
  %r2 = _random_uniform() {shape="(2, 3, 4, 4)"} : f32[2,3,4,4]
  %d1 = Dropout(%x) : f32[2,3,4,4], f32[2,3,4,4]
  %d2 = Dropout(%x) : f32[2,3,4,4], f32[2,3,4,4]
  %bn1 = BatchNorm(%x, %gamma, %beta, %mean, %var) : f32[2,3,4,4], f32[3], f32[3]
  %bn2 = BatchNorm(%x, %gamma, %beta, %mean, %var) : f32[2,3,4,4], f32[3], f32[3]
  %z1 = _zeros() {shape="(2, 3)"} : f32[2,3]
  %z2 = _zeros() {shape="(2, 3)"} : f32[2,3]
  return %r1, %r2, %d1, %d2, %bn1, %bn2, %z1, %z2
}
)IR";
  int64_t merged = 0;
  std::string out = cse(text, &merged);
  EXPECT_EQ(merged, 1) << out;  // only the zeros
  EXPECT_EQ(out.find("%z2 ="), std::string::npos) << out;
  EXPECT_NE(out.find("%bn2 ="), std::string::npos) << out;
  EXPECT_NE(out.find("%d2 ="), std::string::npos) << out;
  EXPECT_NE(out.find("%r2 ="), std::string::npos) << out;
  EXPECT_FALSE(is_pure(op_def(OpId::kDropout)));
  EXPECT_FALSE(is_pure(op_def(OpId::kBatchNorm)));
  EXPECT_FALSE(is_pure(op_def(OpId::kSgdMomUpdate)));
  EXPECT_TRUE(is_pure(op_def(OpId::kFullyConnected)));
}

TEST(EliminateCommonExpr, RandomGraphsComputeTheSameOutputs) {
  int64_t merged = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    ir::Graph g = testing::random_graph(seed);
    PassContext ctx(PassOptions{});
    ir::Graph out = run_pipeline(g, "eliminate-common-expr,eliminate-dead-code", ctx);
    merged += ctx.stats[0].merged;
    // A second run finds nothing more.
    PassContext again(PassOptions{});
    EXPECT_EQ(run_pass("eliminate-common-expr", out, again).to_text(), out.to_text()) << "seed " << seed;
    auto bind = testing::random_bindings(g, seed);
    testing::expect_all_close(testing::eval_graph(g, bind), testing::eval_graph(out, bind), 0, 0,
                              fmt::format("seed {}", seed));
  }
  EXPECT_GT(merged, 0) << "the random graphs should contain repeated subexpressions";
}

}  // namespace
}  // namespace kiln::passes
