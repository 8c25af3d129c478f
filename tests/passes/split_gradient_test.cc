// split-gradient: the forward part computes what the forward outputs need
// (and effects), saves what backward reads, and leaves every op that only
// backward needs — even one that reads only forward values — to backward.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/ranges.h>

#include "ir/ops/conv.h"
#include "passes/gradient.h"
#include "passes/split_gradient.h"

namespace kiln::passes {
namespace {

const char* kAbsNet = R"IR(graph {
  %x = input f32[4,5]
  %w = param f32[6,5]
  %fc = FullyConnected(%x, %w) {no_bias="True", num_hidden="6"} : f32[4,6]
  %r = abs(%fc) : f32[4,6]
  %out = sum(%r) : f32[]
  return %out
})IR";

bool has_op(const ir::Graph& g, OpId op) {
  return std::any_of(g.nodes().begin(), g.nodes().end(), [&](const ir::Node& n) { return n.is_op() && n.op == op; });
}

SplitGraph split(const ir::Graph& fwd, const std::vector<std::string>& wrt) {
  ir::Graph grad = build_gradient_graph(fwd, wrt);
  std::vector<std::string> heads;
  for (size_t i = 0; i < fwd.outputs().size(); ++i) heads.push_back(head_grad_name(fwd, i));
  return split_gradient_graph(grad, fwd.outputs().size(), heads);
}

TEST(SplitGradient, MasksOfAGradientRunAtBackward) {
  ir::Graph fwd = ir::parse_graph(kAbsNet);
  SplitGraph s = split(fwd, {"w"});
  // abs's gradient multiplies by (fc > 0) - (fc < 0): computing those masks
  // in the forward part would save two [4,6] arrays; they read %fc, which is
  // saved instead.
  for (OpId mask : {OpId::kGreaterScalar, OpId::kLesserScalar}) {
    EXPECT_FALSE(has_op(s.forward, mask)) << s.forward.to_text();
    EXPECT_TRUE(has_op(s.backward, mask)) << s.backward.to_text();
  }
  EXPECT_EQ(s.saved, std::vector<std::string>{"saved/fc"});
  // The forward part computes only the forward output and what it needs.
  EXPECT_TRUE(has_op(s.forward, OpId::kFullyConnected));
  EXPECT_TRUE(has_op(s.forward, OpId::kAbs));
  EXPECT_FALSE(has_op(s.backward, OpId::kAbs));
}

TEST(SplitGradient, ReluSavesItsOutputOnly) {
  const char* text = R"IR(graph {
  %x = input f32[4,5]
  %w = param f32[6,5]
  %fc = FullyConnected(%x, %w) {no_bias="True", num_hidden="6"} : f32[4,6]
  %r = relu(%fc) : f32[4,6]
  %out = sum(%r) : f32[]
  return %out
})IR";
  SplitGraph s = split(ir::parse_graph(text), {"w"});
  EXPECT_EQ(s.saved, std::vector<std::string>{"saved/r"});
}

TEST(SplitGradient, EffectsRunOnceInForward) {
  const char* text = R"IR(graph {
  %x = input f32[4,3,2,2]
  %gamma = param f32[3]
  %beta = param f32[3]
  %mean = aux f32[3]
  %var = aux f32[3]
  %bn = BatchNorm(%x, %gamma, %beta, %mean, %var) : f32[4,3,2,2], f32[3], f32[3]
  %out = sum(%bn) : f32[]
  return %out
})IR";
  ir::Graph fwd = ir::parse_graph(text);
  SplitGraph s = split(fwd, {"gamma", "beta"});
  EXPECT_TRUE(has_op(s.forward, OpId::kBatchNorm)) << s.forward.to_text();
  EXPECT_FALSE(has_op(s.backward, OpId::kBatchNorm)) << s.backward.to_text();
}

TEST(SplitGradient, ActivationOfBatchNormIsRecomputedNotSaved) {
  const char* text = R"IR(graph {
  %x = input f32[2,3,4,4]
  %w1 = param f32[3,3,3,3]
  %gamma = param f32[3]
  %beta = param f32[3]
  %mean = aux f32[3]
  %var = aux f32[3]
  %w2 = param f32[3,3,3,3]
  %conv1 = Convolution(%x, %w1) {kernel="(3, 3)", no_bias="True", num_filter="3", pad="(1, 1)"} : f32[2,3,4,4]
  %bn = BatchNorm(%conv1, %gamma, %beta, %mean, %var) {fix_gamma="False"} : f32[2,3,4,4], f32[3], f32[3]
  %act = relu(%bn) : f32[2,3,4,4]
  %conv2 = Convolution(%act, %w2) {kernel="(3, 3)", no_bias="True", num_filter="3", pad="(1, 1)"} : f32[2,3,4,4]
  %out = sum(%conv2) : f32[]
  return %out
})IR";
  ir::Graph fwd = ir::parse_graph(text);
  SplitGraph s = split(fwd, {"w1", "gamma", "beta", "w2"});
  // conv2's weight gradient reads %act: recomputed from conv1's output and
  // the batch statistics, which BatchNorm's gradient saves anyway.
  auto saved = [&](const std::string& name) { return std::find(s.saved.begin(), s.saved.end(), name) != s.saved.end(); };
  EXPECT_FALSE(saved("saved/act")) << fmt::format("{}", fmt::join(s.saved, ", "));
  EXPECT_TRUE(saved("saved/conv1"));
  EXPECT_TRUE(saved("saved/bn/1"));
  EXPECT_TRUE(saved("saved/bn/2"));
  bool recomputed = false;
  for (const ir::Node& n : s.backward.nodes()) {
    if (!n.is_op() || n.op != OpId::kBatchNorm) continue;
    recomputed = true;
    EXPECT_TRUE(n.attrs.as<BatchNormAttrs>().use_global_stats) << s.backward.to_text();
    EXPECT_FALSE(n.attrs.as<BatchNormAttrs>().fix_gamma);
  }
  EXPECT_TRUE(recomputed) << s.backward.to_text();
  EXPECT_TRUE(has_op(s.backward, OpId::kRelu));
  ir::verify(s.backward);
}

TEST(SplitGradient, ResidualActivationIsRecomputedFromSavedValues) {
  // Two residual blocks: %y1 = relu(bn1(conv1(%y0)) + %y0), %y2 likewise
  // from %y1. %y0 is saved (conv1's weight gradient reads it); %y1 and %y2
  // are recomputed at backward (y1 from y0, y2 from the recomputed y1),
  // unlike the block whose add reads a value backward would not have.
  const char* text = R"IR(graph {
  %x = input f32[2,3,4,4]
  %w0 = param f32[3,3,3,3]
  %w1 = param f32[3,3,3,3]
  %w2 = param f32[3,3,3,3]
  %w3 = param f32[3,3,3,3]
  %gamma = param f32[3]
  %beta = param f32[3]
  %mean = aux f32[3]
  %var = aux f32[3]
  %y0 = Convolution(%x, %w0) {kernel="(3, 3)", no_bias="True", num_filter="3", pad="(1, 1)"} : f32[2,3,4,4]
  %c1 = Convolution(%y0, %w1) {kernel="(3, 3)", no_bias="True", num_filter="3", pad="(1, 1)"} : f32[2,3,4,4]
  %bn1 = BatchNorm(%c1, %gamma, %beta, %mean, %var) {fix_gamma="False"} : f32[2,3,4,4], f32[3], f32[3]
  %s1 = elemwise_add(%bn1, %y0) : f32[2,3,4,4]
  %y1 = relu(%s1) : f32[2,3,4,4]
  %c2 = Convolution(%y1, %w2) {kernel="(3, 3)", no_bias="True", num_filter="3", pad="(1, 1)"} : f32[2,3,4,4]
  %bn2 = BatchNorm(%c2, %gamma, %beta, %mean, %var) {fix_gamma="False"} : f32[2,3,4,4], f32[3], f32[3]
  %s2 = elemwise_add(%y1, %bn2) : f32[2,3,4,4]
  %y2 = relu(%s2) : f32[2,3,4,4]
  %c3 = Convolution(%y2, %w3) {kernel="(3, 3)", no_bias="True", num_filter="3", pad="(1, 1)"} : f32[2,3,4,4]
  %bn3 = BatchNorm(%c3, %gamma, %beta, %mean, %var) {fix_gamma="False"} : f32[2,3,4,4], f32[3], f32[3]
  %e3 = _mul_scalar(%c3) {scalar="2"} : f32[2,3,4,4]
  %s3 = elemwise_add(%bn3, %e3) : f32[2,3,4,4]
  %y3 = relu(%s3) : f32[2,3,4,4]
  %out = sum(%y3) : f32[]
  return %out
})IR";
  ir::Graph fwd = ir::parse_graph(text);
  SplitGraph s = split(fwd, {"w0", "w1", "w2", "w3", "gamma", "beta"});
  auto saved = [&](const std::string& name) { return std::find(s.saved.begin(), s.saved.end(), name) != s.saved.end(); };
  const std::string list = fmt::format("{}", fmt::join(s.saved, ", "));
  EXPECT_TRUE(saved("saved/y0")) << list;
  EXPECT_FALSE(saved("saved/y1")) << list;
  EXPECT_FALSE(saved("saved/y2")) << list;
  EXPECT_TRUE(saved("saved/y3")) << list << ": 2 * c3 is not something backward has";
  for (const char* name : {"saved/c1", "saved/c2", "saved/bn1/1", "saved/bn2/2"}) EXPECT_TRUE(saved(name)) << name << " in " << list;
  int recomputed_bn = 0;
  for (const ir::Node& n : s.backward.nodes()) recomputed_bn += n.is_op() && n.op == OpId::kBatchNorm;
  EXPECT_EQ(recomputed_bn, 2) << s.backward.to_text();
  EXPECT_TRUE(s.backward.find("s1").has_value()) << s.backward.to_text();
  EXPECT_TRUE(s.backward.find("y2").has_value());
  ir::verify(s.backward);
}

}  // namespace
}  // namespace kiln::passes
