// channels-last: Before/After graphs (regions move whole, transposes only at
// their borders, weights transposed once), the same outputs as before,
// float32 and unmovable ops left alone.
#include <gtest/gtest.h>

#include "passes/channels_last.h"
#include "tests/passes/eval_graph.h"

namespace kiln::passes {
namespace {

ir::Graph run(const ir::Graph& g, PassContext& ctx) {
  return run_pipeline(g, "channels-last,eliminate-dead-code", ctx);
}

int count_ops(const ir::Graph& g, OpId op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.is_op() && node.op == op;
  return n;
}

void expect_same_outputs(const ir::Graph& before, const ir::Graph& after, double tol) {
  auto bound = kiln::testing::random_bindings(before, 7);
  kiln::testing::expect_all_close(kiln::testing::eval_graph(after, bound), kiln::testing::eval_graph(before, bound),
                                  tol, tol);
}

// A residual block of fused convolutions, max pooling, global pooling, a classifier.
const char* kResidual = R"IR(graph {
  %x = input bf16[2,16,8,8]
  %w1 = param bf16[16,16,3,3]
  %b1 = param bf16[16]
  %w2 = param bf16[16,16,3,3]
  %fc_w = param bf16[10,16]
  %c1 = _kiln_conv_act(%x, %w1, %b1) {act_type="relu", kernel="(3, 3)", num_filter="16", pad="(1, 1)"} : bf16[2,16,8,8]
  %c2 = _kiln_conv_act(%c1, %w2, %x) {act_type="relu", kernel="(3, 3)", no_bias="True", num_filter="16", pad="(1, 1)", with_sum="True"} : bf16[2,16,8,8]
  %p = Pooling(%c2) {kernel="(3, 3)", pad="(1, 1)", pool_type="max", stride="(2, 2)"} : bf16[2,16,4,4]
  %g = Pooling(%p) {global_pool="True", pool_type="avg"} : bf16[2,16,1,1]
  %f = Flatten(%g) : bf16[2,16]
  %y = FullyConnected(%f, %fc_w) {no_bias="True", num_hidden="10"} : bf16[2,10]
  return %y
}
)IR";

TEST(ChannelsLast, ARegionMovesWholeWithTransposesAtItsBorders) {
  const char* after = R"IR(graph {
  %x = input bf16[2,16,8,8]
  %w1 = param bf16[16,16,3,3]
  %b1 = param bf16[16]
  %w2 = param bf16[16,16,3,3]
  %fc_w = param bf16[10,16]
  %c1_to_nhwc = transpose(%x) {axes="(0, 2, 3, 1)"} : bf16[2,8,8,16]
  %c1_weight_to_ohwi = transpose(%w1) {axes="(0, 2, 3, 1)"} : bf16[16,3,3,16]
  %c1 = _kiln_conv_act(%c1_to_nhwc, %c1_weight_to_ohwi, %b1) {act_type="relu", kernel="(3, 3)", layout="NHWC", num_filter="16", pad="(1, 1)"} : bf16[2,8,8,16]
  %c2_weight_to_ohwi = transpose(%w2) {axes="(0, 2, 3, 1)"} : bf16[16,3,3,16]
  %c2 = _kiln_conv_act(%c1, %c2_weight_to_ohwi, %c1_to_nhwc) {act_type="relu", kernel="(3, 3)", layout="NHWC", no_bias="True", num_filter="16", pad="(1, 1)", with_sum="True"} : bf16[2,8,8,16]
  %p = Pooling(%c2) {kernel="(3, 3)", layout="NHWC", pad="(1, 1)", stride="(2, 2)"} : bf16[2,4,4,16]
  %g = Pooling(%p) {global_pool="True", layout="NHWC", pool_type="avg"} : bf16[2,1,1,16]
  %g_to_nchw = transpose(%g) {axes="(0, 3, 1, 2)"} : bf16[2,16,1,1]
  %f = Flatten(%g_to_nchw) : bf16[2,16]
  %y = FullyConnected(%f, %fc_w) {no_bias="True", num_hidden="10"} : bf16[2,10]
  return %y
}
)IR";
  PassContext ctx;
  const ir::Graph before = ir::parse_graph(kResidual);
  const ir::Graph got = run(before, ctx);
  EXPECT_EQ(got.to_text(), after);
  EXPECT_EQ(ctx.stats[0].rewritten, 4);
  EXPECT_EQ(ctx.stats[0].added, 4);
  expect_same_outputs(before, got, 2e-2);
}

TEST(ChannelsLast, PointwiseOpsFollowAndSharedValuesAreTransposedOnce) {
  // %r is read by a moved op (the second convolution), a pointwise op whose
  // other input is channel-first only, and the graph's output.
  const char* text = R"IR(graph {
  %x = input f16[1,8,6,6]
  %w = param f16[8,8,1,1]
  %c = Convolution(%x, %w) {kernel="(1, 1)", no_bias="True", num_filter="8"} : f16[1,8,6,6]
  %r = relu(%c) : f16[1,8,6,6]
  %d = Convolution(%r, %w) {kernel="(1, 1)", no_bias="True", num_filter="8"} : f16[1,8,6,6]
  %s = elemwise_add(%d, %x) : f16[1,8,6,6]
  %t = elemwise_mul(%r, %d) : f16[1,8,6,6]
  return %r, %s, %t
}
)IR";
  PassContext ctx;
  const ir::Graph before = ir::parse_graph(text);
  const ir::Graph got = run(before, ctx);
  // Moved: c, r, d, s (x has a channel-last form), t. Transposes: x in, w once,
  // and r, s, t back for the outputs.
  EXPECT_EQ(ctx.stats[0].rewritten, 5) << got.to_text();
  EXPECT_EQ(count_ops(got, OpId::kTranspose), 5) << got.to_text();
  expect_same_outputs(before, got, 2e-3);
}

TEST(ChannelsLast, Float32AndUnmovableOpsStayChannelFirst) {
  const char* f32 = R"IR(graph {
  %x = input f32[1,4,6,6]
  %w = param f32[4,4,3,3]
  %c = Convolution(%x, %w) {kernel="(3, 3)", no_bias="True", num_filter="4"} : f32[1,4,4,4]
  return %c
}
)IR";
  PassContext ctx;
  EXPECT_EQ(run(ir::parse_graph(f32), ctx).to_text(), ir::parse_graph(f32).to_text());
  EXPECT_FALSE(ctx.stats[0].changed);

  // Sum pooling and a channel-wise broadcast stay channel-first: the value goes back.
  const char* text = R"IR(graph {
  %x = input bf16[1,4,6,6]
  %w = param bf16[4,4,3,3]
  %bias = param bf16[1,4,1,1]
  %c = Convolution(%x, %w) {kernel="(3, 3)", no_bias="True", num_filter="4"} : bf16[1,4,4,4]
  %p = Pooling(%c) {kernel="(2, 2)", pool_type="sum", stride="(2, 2)"} : bf16[1,4,2,2]
  %b = broadcast_add(%c, %bias) : bf16[1,4,4,4]
  return %p, %b
}
)IR";
  PassContext ctx2;
  const ir::Graph before = ir::parse_graph(text);
  const ir::Graph got = run(before, ctx2);
  EXPECT_EQ(ctx2.stats[0].rewritten, 1) << got.to_text();
  EXPECT_EQ(count_ops(got, OpId::kTranspose), 3) << got.to_text();  // x in, w, c back
  expect_same_outputs(before, got, 2e-2);
}

}  // namespace
}  // namespace kiln::passes
