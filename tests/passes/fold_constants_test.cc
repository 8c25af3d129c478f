// fold-constants: Before/After graphs, and random graphs whose params are
// uniform constants computing the same outputs before and after folding.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/ops/elemwise_math.h"
#include "ir/ops/init.h"
#include "passes/fold_constants.h"
#include "passes/graph_copy.h"
#include "tests/passes/eval_graph.h"
#include "tests/passes/random_graph.h"

namespace kiln::passes {
namespace {

TEST(FoldConstants, FoldsChainsIntoOneFull) {
  const char* before = R"IR(graph {
  %x = input f64[2,3]
  %one = _ones() {dtype="float64", shape="(2, 3)"} : f64[2,3]
  %e = exp(%one) : f64[2,3]
  %m = _mul_scalar(%e) {scalar="2"} : f64[2,3]
  %s = sum(%m) {axis="(1,)"} : f64[2]
  %y = broadcast_add(%x, %m) : f64[2,3]
  return %y, %s
}
)IR";
  std::string after = fmt::format(R"IR(graph {{
  %x = input f64[2,3]
  %m = _full() {{dtype="float64", shape="(2, 3)", value="{}"}} : f64[2,3]
  %s = _full() {{dtype="float64", shape="(2,)", value="{}"}} : f64[2]
  %y = broadcast_add(%x, %m) : f64[2,3]
  return %y, %s
}}
)IR",
                                  print_attr(2 * std::exp(1.0)), print_attr(3 * (2 * std::exp(1.0))));
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pipeline(ir::parse_graph(before), "fold-constants,eliminate-dead-code", ctx);
  EXPECT_EQ(out.to_text(), after);
  EXPECT_EQ(ctx.stats[0].rewritten, 3);
}

// A float32 node folds to what the kernels compute: the shared float math
// (ir/ops/elemwise_math.h), not a double result rounded afterwards.
TEST(FoldConstants, Float32NodesFoldToTheKernelsFloatResult) {
  const char* before = R"IR(graph {
  %one = _ones() {dtype="float32", shape="(2, 3)"} : f32[2,3]
  %a = _mul_scalar(%one) {scalar="0.5"} : f32[2,3]
  %e = exp(%a) : f32[2,3]
  %s = Activation(%e) {act_type="softrelu"} : f32[2,3]
  return %s
}
)IR";
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pipeline(ir::parse_graph(before), "fold-constants,eliminate-dead-code", ctx);
  float want = math::op_softrelu(math::op_exp(math::op_mul(1.0f, 0.5f, 0.0f), 0.0f, 0.0f), 0.0f, 0.0f);
  const ir::Node& full = out.node(out.outputs()[0].node);
  ASSERT_EQ(full.op, OpId::kFull);
  EXPECT_EQ(static_cast<float>(full.attrs.as<FullAttrs>().value), want);
}

// The trigonometric, rounding, sign and mod ops fold through the same
// float functions as their kernels.
TEST(FoldConstants, MathOpsFoldToTheKernelsFloatResult) {
  const char* before = R"IR(graph {
  %one = _ones() {dtype="float32", shape="(3,)"} : f32[3]
  %a = _mul_scalar(%one) {scalar="-2.5"} : f32[3]
  %s = sin(%a) : f32[3]
  %t = arctanh(%s) : f32[3]
  %r = rint(%a) : f32[3]
  %g = sign(%a) : f32[3]
  %m = broadcast_mod(%a, %s) : f32[3]
  %f = _kiln_broadcast_fmod(%a, %s) : f32[3]
  return %t, %r, %g, %m, %f
}
)IR";
  PassContext ctx(PassOptions{});
  ir::Graph g = ir::parse_graph(before);
  ir::Graph out = run_pipeline(g, "fold-constants,eliminate-dead-code", ctx);
  const float a = -2.5f, s = math::op_sin(a);
  const float want[] = {math::op_arctanh(s), -2.0f, -1.0f, math::op_mod(a, s), math::op_fmod(a, s)};
  std::vector<NDArray> evaluated = testing::eval_graph(g, {});
  for (size_t i = 0; i < 5; ++i) {
    const ir::Node& full = out.node(out.outputs()[i].node);
    ASSERT_EQ(full.op, OpId::kFull) << i;
    EXPECT_EQ(static_cast<float>(full.attrs.as<FullAttrs>().value), want[i]) << i;
    EXPECT_EQ(evaluated[i].to_vector<float>()[0], want[i]) << "kernel, output " << i;
  }
}

TEST(FoldConstants, LeavesWhatItCannotEvaluate) {
  const char* text = R"IR(graph {
  %x = input f64[2,3]
  %w = _ones() {dtype="float64", shape="(4, 3)"} : f64[4,3]
  %r = _arange() {dtype="float64", start="6"} : f64[6]
  %i = _ones() {dtype="int32", shape="(3,)"} : i32[3]
  %fc = FullyConnected(%x, %w) {no_bias="True", num_hidden="4"} : f64[2,4]
  %e = exp(%r) : f64[6]
  %n = negative(%i) : i32[3]
  return %fc, %e, %n
}
)IR";
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pass("fold-constants", ir::parse_graph(text), ctx);
  EXPECT_EQ(out.to_text(), text);
  EXPECT_FALSE(ctx.stats.back().changed);
}

// `g` with every param and input "y" replaced by a `_full` of a random value.
ir::Graph with_uniform_params(const ir::Graph& g, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  GraphCopy copy(g);
  for (size_t i = 0; i < g.size(); ++i) {
    auto id = static_cast<ir::NodeId>(i);
    const ir::Node& n = g.node(id);
    if (n.is_op() || n.name == "x") {
      copy.copy_node(id);
      continue;
    }
    FullAttrs full;
    full.shape = n.types[0].shape;
    full.dtype = n.types[0].dtype;
    full.value = dist(gen);
    copy.map_entry({id, 0}, copy.graph().add_op(OpId::kFull, OpAttrs::make(full), {}, n.name)[0]);
  }
  return copy.finish();
}

TEST(FoldConstants, RandomGraphsComputeTheSameOutputs) {
  int64_t folded = 0;
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    ir::Graph g = with_uniform_params(testing::random_graph(seed, 30, true), seed);
    PassContext ctx(PassOptions{});
    ir::Graph out = run_pipeline(g, "fold-constants,simplify-algebra,eliminate-dead-code", ctx);
    folded += ctx.stats[0].rewritten;
    auto bind = testing::random_bindings(g, seed);
    testing::expect_all_close(testing::eval_graph(g, bind), testing::eval_graph(out, bind), 1e-9, 1e-12,
                              fmt::format("seed {}", seed));
  }
  EXPECT_GT(folded, 30);
}

}  // namespace
}  // namespace kiln::passes
