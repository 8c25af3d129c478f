// amp-cast: Before/After graphs for each policy class, one cast per value,
// round trips undone, BatchNorm's float32 inputs, and no option, no change.
#include <gtest/gtest.h>

#include "passes/amp_cast.h"
#include "tests/passes/eval_graph.h"

namespace kiln::passes {
namespace {

std::string amp(const char* text, std::optional<DType> dtype = DType::kBfloat16) {
  PassOptions options;
  options.amp = dtype;
  PassContext ctx(options);
  return run_pipeline(ir::parse_graph(text), "amp-cast,eliminate-dead-code", ctx).to_text();
}

TEST(AmpCast, LayersGoLowSoftmaxGoesBackToFloat32) {
  const char* before = R"IR(graph {
  %x = input f32[2,4]
  %w = param f32[3,4]
  %b = param f32[3]
  %fc = FullyConnected(%x, %w, %b) {num_hidden="3"} : f32[2,3]
  %r = relu(%fc) : f32[2,3]
  %s = softmax(%r) : f32[2,3]
  return %s
}
)IR";
  const char* after = R"IR(graph {
  %x = input f32[2,4]
  %w = param f32[3,4]
  %b = param f32[3]
  %fc_amp_cast0 = Cast(%x) {dtype="bfloat16"} : bf16[2,4]
  %fc_amp_cast1 = Cast(%w) {dtype="bfloat16"} : bf16[3,4]
  %fc_amp_cast2 = Cast(%b) {dtype="bfloat16"} : bf16[3]
  %fc = FullyConnected(%fc_amp_cast0, %fc_amp_cast1, %fc_amp_cast2) {num_hidden="3"} : bf16[2,3]
  %r = relu(%fc) : bf16[2,3]
  %s_amp_cast0 = Cast(%r) {dtype="float32"} : f32[2,3]
  %s = softmax(%s_amp_cast0) : f32[2,3]
  return %s
}
)IR";
  EXPECT_EQ(amp(before), after);
  // Without the option the pass changes nothing.
  EXPECT_EQ(amp(before, std::nullopt), ir::parse_graph(before).to_text());
}

TEST(AmpCast, OneCastPerValueAndDtype) {
  const char* before = R"IR(graph {
  %x = input f32[2,4]
  %w = param f32[4,4]
  %a = dot(%x, %w) : f32[2,4]
  %b = dot(%x, %w) {transpose_b="True"} : f32[2,4]
  %c = elemwise_add(%a, %b) : f32[2,4]
  return %c
}
)IR";
  const char* after = R"IR(graph {
  %x = input f32[2,4]
  %w = param f32[4,4]
  %a_amp_cast0 = Cast(%x) {dtype="bfloat16"} : bf16[2,4]
  %a_amp_cast1 = Cast(%w) {dtype="bfloat16"} : bf16[4,4]
  %a = dot(%a_amp_cast0, %a_amp_cast1) : bf16[2,4]
  %b = dot(%a_amp_cast0, %a_amp_cast1) {transpose_b="True"} : bf16[2,4]
  %c = elemwise_add(%a, %b) : bf16[2,4]
  return %c
}
)IR";
  EXPECT_EQ(amp(before), after);
}

TEST(AmpCast, PromotionAndRoundTrips) {
  // A bfloat16 value the user widened is read as it was by a layer that
  // wants bfloat16; the layer's bfloat16 result meets a float32 value in float32.
  const char* before = R"IR(graph {
  %x = input bf16[2,4]
  %f = input f32[2,4]
  %w = param f32[4,4]
  %wide = Cast(%x) {dtype="float32"} : f32[2,4]
  %y = dot(%wide, %w) : f32[2,4]
  %s = elemwise_add(%y, %f) : f32[2,4]
  return %s
}
)IR";
  const char* after = R"IR(graph {
  %x = input bf16[2,4]
  %f = input f32[2,4]
  %w = param f32[4,4]
  %y_amp_cast1 = Cast(%w) {dtype="bfloat16"} : bf16[4,4]
  %y = dot(%x, %y_amp_cast1) : bf16[2,4]
  %s_amp_cast0 = Cast(%y) {dtype="float32"} : f32[2,4]
  %s = elemwise_add(%s_amp_cast0, %f) : f32[2,4]
  return %s
}
)IR";
  EXPECT_EQ(amp(before), after);
}

TEST(AmpCast, BatchNormKeepsItsChannelVectorsInFloat32) {
  const char* before = R"IR(graph {
  %x = input f32[2,3,5,5]
  %w = param f32[4,3,3,3]
  %gamma = param f32[4]
  %beta = param f32[4]
  %mean = aux f32[4]
  %var = aux f32[4]
  %conv = Convolution(%x, %w) {kernel="(3, 3)", no_bias="True", num_filter="4"} : f32[2,4,3,3]
  %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var) : f32[2,4,3,3], f32[4], f32[4]
  return %bn
}
)IR";
  const char* after = R"IR(graph {
  %x = input f32[2,3,5,5]
  %w = param f32[4,3,3,3]
  %gamma = param f32[4]
  %beta = param f32[4]
  %mean = aux f32[4]
  %var = aux f32[4]
  %conv_amp_cast0 = Cast(%x) {dtype="bfloat16"} : bf16[2,3,5,5]
  %conv_amp_cast1 = Cast(%w) {dtype="bfloat16"} : bf16[4,3,3,3]
  %conv = Convolution(%conv_amp_cast0, %conv_amp_cast1) {kernel="(3, 3)", no_bias="True", num_filter="4"} : bf16[2,4,3,3]
  %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var) : bf16[2,4,3,3], f32[4], f32[4]
  return %bn
}
)IR";
  EXPECT_EQ(amp(before), after);
}

// The pass keeps what the graph computes, up to bfloat16 rounding.
TEST(AmpCast, ComputesTheSameUpToRounding) {
  const char* text = R"IR(graph {
  %x = input f32[3,4]
  %w = param f32[5,4]
  %b = param f32[5]
  %fc = FullyConnected(%x, %w, %b) {num_hidden="5"} : f32[3,5]
  %t = tanh(%fc) : f32[3,5]
  %s = log_softmax(%t) : f32[3,5]
  return %s
}
)IR";
  ir::Graph g = ir::parse_graph(text);
  PassOptions options;
  options.amp = DType::kBfloat16;
  PassContext ctx(options);
  ir::Graph cast = run_pass("amp-cast", g, ctx);
  EXPECT_EQ(ctx.stats.back().added, 4);
  testing::Bindings inputs = testing::random_bindings(g, 17);
  testing::expect_all_close(testing::eval_graph(cast, inputs), testing::eval_graph(g, inputs), 0.02, 0.02);
}

}  // namespace
}  // namespace kiln::passes
