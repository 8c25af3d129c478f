// fuse-conv-activation: Before/After graphs, the cases it must leave alone,
// and random Convolution/FullyConnected chains that compute the same outputs
// (through the fused CPU kernels) before and after.
#include <gtest/gtest.h>

#include <random>

#include "ir/ops/fused_layers.h"
#include "passes/fuse_conv_activation.h"
#include "tests/passes/eval_graph.h"

namespace kiln::passes {
namespace {

ir::Graph run(const ir::Graph& g, PassContext& ctx) { return run_pass("fuse-conv-activation", g, ctx); }

TEST(FuseConvActivation, ConvolutionBiasResidualRelu) {
  const char* before = R"IR(graph {
  %x = input f32[2,4,5,5]
  %w = param f32[4,4,3,3]
  %b = param f32[4]
  %c = Convolution(%x, %w, %b) {kernel="(3, 3)", num_filter="4", pad="(1, 1)"} : f32[2,4,5,5]
  %s = elemwise_add(%x, %c) : f32[2,4,5,5]
  %y = Activation(%s) {act_type="relu"} : f32[2,4,5,5]
  return %y
}
)IR";
  const char* after = R"IR(graph {
  %x = input f32[2,4,5,5]
  %w = param f32[4,4,3,3]
  %b = param f32[4]
  %c = _kiln_conv_act(%x, %w, %b, %x) {act_type="relu", kernel="(3, 3)", num_filter="4", pad="(1, 1)", with_sum="True"} : f32[2,4,5,5]
  return %c
}
)IR";
  PassContext ctx(PassOptions{});
  ir::Graph out = run(ir::parse_graph(before), ctx);
  EXPECT_EQ(out.to_text(), after);
  EXPECT_EQ(ctx.stats.back().fused, 3);
  EXPECT_TRUE(ctx.stats.back().changed);
  EXPECT_EQ(ir::parse_graph(after).to_text(), after);  // the fused op's attributes round-trip
}

TEST(FuseConvActivation, ChannelConstantBecomesTheBias) {
  const char* before = R"IR(graph {
  %x = input f32[2,3,4,4]
  %w = param f32[4,3,1,1]
  %k = param f32[1,4,1,1]
  %c = Convolution(%x, %w) {kernel="(1, 1)", no_bias="True", num_filter="4"} : f32[2,4,4,4]
  %a = broadcast_add(%k, %c) : f32[2,4,4,4]
  %y = sigmoid(%a) : f32[2,4,4,4]
  return %y
}
)IR";
  const char* after = R"IR(graph {
  %x = input f32[2,3,4,4]
  %w = param f32[4,3,1,1]
  %k = param f32[1,4,1,1]
  %c/channel_bias = Reshape(%k) {shape="(4,)"} : f32[4]
  %c = _kiln_conv_act(%x, %w, %c/channel_bias) {act_type="sigmoid", kernel="(1, 1)", num_filter="4"} : f32[2,4,4,4]
  return %c
}
)IR";
  PassContext ctx(PassOptions{});
  EXPECT_EQ(run(ir::parse_graph(before), ctx).to_text(), after);
  EXPECT_EQ(ctx.stats.back().fused, 3);
}

TEST(FuseConvActivation, FullyConnectedActivation) {
  const char* before = R"IR(graph {
  %x = input f32[1,8]
  %w = param f32[6,8]
  %b = param f32[6]
  %fc = FullyConnected(%x, %w, %b) {num_hidden="6"} : f32[1,6]
  %y = Activation(%fc) {act_type="tanh"} : f32[1,6]
  %z = exp(%y) : f32[1,6]
  return %z
}
)IR";
  const char* after = R"IR(graph {
  %x = input f32[1,8]
  %w = param f32[6,8]
  %b = param f32[6]
  %fc = _kiln_fc_act(%x, %w, %b) {act_type="tanh", num_hidden="6"} : f32[1,6]
  %z = exp(%fc) : f32[1,6]
  return %z
}
)IR";
  PassContext ctx(PassOptions{});
  EXPECT_EQ(run(ir::parse_graph(before), ctx).to_text(), after);
  EXPECT_EQ(ctx.stats.back().fused, 2);
}

TEST(FuseConvActivation, LeavesSharedAndOutputValuesAndSoftsignAlone) {
  const char* texts[] = {
      // the convolution's output is also a graph output
      R"IR(graph {
  %x = input f32[1,2,3,3]
  %w = param f32[2,2,1,1]
  %c = Convolution(%x, %w) {kernel="(1, 1)", no_bias="True", num_filter="2"} : f32[1,2,3,3]
  %y = relu(%c) : f32[1,2,3,3]
  return %y, %c
}
)IR",
      // the sum is read twice
      R"IR(graph {
  %x = input f32[1,2,3,3]
  %w = param f32[2,2,1,1]
  %c = Convolution(%x, %w) {kernel="(1, 1)", no_bias="True", num_filter="2"} : f32[1,2,3,3]
  %s = elemwise_add(%c, %x) : f32[1,2,3,3]
  %y = relu(%s) : f32[1,2,3,3]
  %z = elemwise_mul(%s, %y) : f32[1,2,3,3]
  return %z
}
)IR",
      // softsign has no oneDNN post-op
      R"IR(graph {
  %x = input f32[2,3]
  %w = param f32[4,3]
  %fc = FullyConnected(%x, %w) {no_bias="True", num_hidden="4"} : f32[2,4]
  %y = Activation(%fc) {act_type="softsign"} : f32[2,4]
  return %y
}
)IR",
      // a broadcast that is not per channel
      R"IR(graph {
  %x = input f32[1,2,3,3]
  %w = param f32[2,2,1,1]
  %k = param f32[3]
  %c = Convolution(%x, %w) {kernel="(1, 1)", no_bias="True", num_filter="2"} : f32[1,2,3,3]
  %a = broadcast_add(%c, %k) : f32[1,2,3,3]
  %y = relu(%a) : f32[1,2,3,3]
  return %y
}
)IR",
  };
  for (const char* text : texts) {
    PassContext ctx(PassOptions{});
    ir::Graph out = run(ir::parse_graph(text), ctx);
    EXPECT_EQ(out.to_text(), text);
    EXPECT_FALSE(ctx.stats.back().changed);
    EXPECT_EQ(ctx.stats.back().fused, 0);
  }
}

TEST(FuseConvActivation, LeavesTrainModeGraphsAlone) {
  const char* text = R"IR(graph {
  %x = input f32[1,8]
  %w = param f32[6,8]
  %fc = FullyConnected(%x, %w) {no_bias="True", num_hidden="6"} : f32[1,6]
  %y = relu(%fc) : f32[1,6]
  return %y
}
)IR";
  PassOptions train;
  train.train_mode = true;
  PassContext ctx(train);
  EXPECT_EQ(run(ir::parse_graph(text), ctx).to_text(), text);
  EXPECT_FALSE(ctx.stats.back().changed);
}

// Random chains over float32 [2, C, 5, 5] values: Convolution (bias or not)
// -> [broadcast_add of a channel constant] -> [+ an earlier value] -> an
// activation (some not fusable), with intermediates sometimes read twice or
// returned; then Flatten -> FullyConnected -> activation, one row and many.
ir::Graph random_chains(uint32_t seed, int steps = 6) {
  std::mt19937 gen(seed);
  auto pick = [&](int n) { return static_cast<int>(gen() % static_cast<uint32_t>(n)); };
  const DType f32 = DType::kFloat32;
  const int64_t c = 4, batch = 1 + pick(2);
  ir::Graph g;
  std::vector<ir::Entry> pool{g.add_input("x", {Shape{batch, c, 5, 5}, f32})};
  std::vector<ir::Entry> outputs;
  int params = 0;
  auto param = [&](Shape s) { return g.add_param(fmt::format("p{}", params++), {s, f32}); };
  auto any = [&] { return pool[static_cast<size_t>(pick(static_cast<int>(pool.size())))]; };
  auto maybe_leak = [&](ir::Entry e) {  // read elsewhere: blocks fusion through e
    int r = pick(8);
    if (r == 0) outputs.push_back(e);
    if (r == 1) pool.push_back(g.add_op(OpId::kNegative, {}, std::vector{e})[0]);
  };
  auto activate = [&](ir::Entry e) {
    switch (pick(8)) {
      case 0:
        return g.add_op(OpId::kRelu, {}, std::vector{e})[0];
      case 1:
        return g.add_op(OpId::kSigmoid, {}, std::vector{e})[0];
      case 2:
        return g.add_op(OpId::kTanh, {}, std::vector{e})[0];
      case 3:
        return g.add_op(OpId::kNegative, {}, std::vector{e})[0];  // not an activation
      default: {
        const ActType acts[] = {ActType::kRelu, ActType::kSigmoid, ActType::kTanh, ActType::kSoftrelu,
                                ActType::kSoftsign};
        return g.add_op(OpId::kActivation, OpAttrs::make(ActivationAttrs{acts[pick(5)]}), std::vector{e})[0];
      }
    }
  };
  for (int step = 0; step < steps; ++step) {
    ConvolutionAttrs a;
    a.kernel = pick(2) ? Shape{3, 3} : Shape{1, 1};
    if (a.kernel[0] == 3) a.pad = Shape{1, 1};
    a.num_filter = static_cast<int>(c);
    a.no_bias = pick(2);
    std::vector<ir::Entry> in{any(), param(Shape{c, c, a.kernel[0], a.kernel[1]})};
    if (!a.no_bias) in.push_back(param(Shape{c}));
    ir::Entry y = g.add_op(OpId::kConvolution, OpAttrs::make(a), in)[0];
    maybe_leak(y);
    if (pick(3) == 0) {
      ir::Entry k = param(pick(2) ? Shape{1, c, 1, 1} : Shape{c, 1, 1});
      y = g.add_op(OpId::kBroadcastAdd, {}, pick(2) ? std::vector{y, k} : std::vector{k, y})[0];
      maybe_leak(y);
    }
    if (pick(2)) {
      ir::Entry r = any();
      OpId add = pick(2) ? OpId::kElemwiseAdd : OpId::kBroadcastAdd;
      y = g.add_op(add, {}, pick(2) ? std::vector{y, r} : std::vector{r, y})[0];
      maybe_leak(y);
    }
    pool.push_back(activate(y));
  }
  ir::Entry flat = g.add_op(OpId::kFlatten, {}, std::vector{pool.back()})[0];
  for (int rows : {0, 1}) {  // every sample, then the first one alone (the GEMV path)
    ir::Entry x = flat;
    if (rows == 1) {
      const OpDef& slice = op_def(OpId::kSliceAxis);
      x = g.add_op(OpId::kSliceAxis, slice.parse_attrs(slice.name, {{"axis", "0"}, {"begin", "0"}, {"end", "1"}}),
                   std::vector{flat})[0];
    }
    FullyConnectedAttrs f{.num_hidden = 6, .no_bias = pick(2) == 0};
    std::vector<ir::Entry> in{x, param(Shape{6, c * 25})};
    if (!f.no_bias) in.push_back(param(Shape{6}));
    ir::Entry y = g.add_op(OpId::kFullyConnected, OpAttrs::make(f), in)[0];
    maybe_leak(y);
    outputs.push_back(activate(y));
  }
  for (ir::Entry e : pool) outputs.push_back(e);
  g.set_outputs(outputs);
  return g;
}

TEST(FuseConvActivation, RandomChainsComputeTheSameOutputs) {
  int64_t fused = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    ir::Graph g = random_chains(seed);
    PassContext ctx(PassOptions{});
    ir::Graph out = run(g, ctx);
    fused += ctx.stats.back().fused;
    testing::Bindings bound = testing::random_bindings(g, seed);
    testing::expect_all_close(testing::eval_graph(g, bound), testing::eval_graph(out, bound), 1e-4, 1e-5,
                              fmt::format("seed {}:\n{}\n->\n{}", seed, g.to_text(), out.to_text()));
  }
  EXPECT_GT(fused, 80);  // most chains fuse
}

}  // namespace
}  // namespace kiln::passes
