// simplify-algebra: Before/After graphs for each rule, and random graphs with
// identities that compute the same outputs before and after.
#include <gtest/gtest.h>

#include "passes/simplify_algebra.h"
#include "tests/passes/eval_graph.h"
#include "tests/passes/random_graph.h"

namespace kiln::passes {
namespace {

std::string simplify(const char* text, const char* pipeline = "simplify-algebra,eliminate-dead-code") {
  PassContext ctx(PassOptions{});
  return run_pipeline(ir::parse_graph(text), pipeline, ctx).to_text();
}

TEST(SimplifyAlgebra, ScalarIdentitiesAndDoubleNegation) {
  const char* before = R"IR(graph {
  %x = input f64[2,3]
  %a = _mul_scalar(%x) {scalar="1"} : f64[2,3]
  %b = _plus_scalar(%a) {scalar="0"} : f64[2,3]
  %c = negative(%b) : f64[2,3]
  %d = negative(%c) : f64[2,3]
  %e = _div_scalar(%d) {scalar="2"} : f64[2,3]
  return %e
}
)IR";
  const char* after = R"IR(graph {
  %x = input f64[2,3]
  %e = _div_scalar(%x) {scalar="2"} : f64[2,3]
  return %e
}
)IR";
  EXPECT_EQ(simplify(before), after);
}

TEST(SimplifyAlgebra, ReshapeAndTransposeChains) {
  const char* before = R"IR(graph {
  %x = input f64[2,3,4]
  %r1 = Reshape(%x) {shape="(6, 4)"} : f64[6,4]
  %r2 = Reshape(%r1) {shape="(4, -1)"} : f64[4,6]
  %r3 = Reshape(%x) {shape="(2, 3, 4)"} : f64[2,3,4]
  %t1 = transpose(%x) {axes="(1, 0, 2)"} : f64[3,2,4]
  %t2 = transpose(%t1) {axes="(2, 0, 1)"} : f64[4,3,2]
  %t3 = transpose(%x) : f64[4,3,2]
  %t4 = transpose(%t3) : f64[2,3,4]
  return %r2, %r3, %t2, %t4
}
)IR";
  const char* after = R"IR(graph {
  %x = input f64[2,3,4]
  %r2 = Reshape(%x) {shape="(4, 6)"} : f64[4,6]
  %t2 = transpose(%x) {axes="(2, 1, 0)"} : f64[4,3,2]
  return %r2, %x, %t2, %x
}
)IR";
  EXPECT_EQ(simplify(before), after);
}

TEST(SimplifyAlgebra, ZerosAndOnes) {
  const char* before = R"IR(graph {
  %x = input f64[2,3]
  %z = _zeros() {dtype="float64", shape="(2, 3)"} : f64[2,3]
  %o = _ones() {dtype="float64", shape="(3,)"} : f64[3]
  %a = elemwise_add(%z, %x) : f64[2,3]
  %b = broadcast_mul(%a, %o) : f64[2,3]
  %c = add_n(%b, %z, %x) {num_args="3"} : f64[2,3]
  %d = add_n(%z, %c) {num_args="2"} : f64[2,3]
  %e = broadcast_mul(%o, %x) : f64[2,3]
  return %d, %e
}
)IR";
  // z + x, (.) * ones and ones * x are x; add_n drops its zeros, down to one term.
  const char* after = R"IR(graph {
  %x = input f64[2,3]
  %c = add_n(%x, %x) {num_args="2"} : f64[2,3]
  return %c, %x
}
)IR";
  EXPECT_EQ(simplify(before), after);
}

TEST(SimplifyAlgebra, NeverChangesTypes) {
  const char* text = R"IR(graph {
  %x = input f64[3]
  %o = _ones() {dtype="float64", shape="(2, 3)"} : f64[2,3]
  %b = broadcast_mul(%x, %o) : f64[2,3]
  %r = Reshape(%x) {shape="(1, 3)"} : f64[1,3]
  return %b, %r
}
)IR";
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pass("simplify-algebra", ir::parse_graph(text), ctx);
  EXPECT_EQ(out.to_text(), text);
  EXPECT_FALSE(ctx.stats.back().changed);
}

TEST(SimplifyAlgebra, RandomGraphsComputeTheSameOutputs) {
  int64_t rewritten = 0;
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    ir::Graph g = testing::random_graph(seed, 30, true);
    PassContext ctx(PassOptions{});
    ir::Graph out = run_pipeline(g, "simplify-algebra,eliminate-common-expr,eliminate-dead-code", ctx);
    rewritten += ctx.stats[0].rewritten;
    EXPECT_LE(out.num_ops(), g.num_ops());
    auto bind = testing::random_bindings(g, seed);
    testing::expect_all_close(testing::eval_graph(g, bind), testing::eval_graph(out, bind), 1e-12, 1e-14,
                              fmt::format("seed {}", seed));
  }
  EXPECT_GT(rewritten, 10);
}

}  // namespace
}  // namespace kiln::passes
