// fold-batch-norm: Convolution/FullyConnected + BatchNorm in predict mode.
#include <gtest/gtest.h>

#include "frontend/nd.h"
#include "ir/ops/conv.h"
#include "ir/ops/nn.h"
#include "passes/fold_batch_norm.h"
#include "passes/pass.h"
#include "tests/passes/eval_graph.h"

namespace kiln::passes {
namespace {

using kiln::testing::Bindings;

// data -> Convolution(3x3, 4 filters, bias?) -> BatchNorm -> relu
ir::Graph conv_bn(bool conv_bias, bool fix_gamma, bool read_mean = false) {
  ir::Graph g;
  ir::Entry x = g.add_input("data", {Shape{2, 3, 6, 6}, DType::kFloat32});
  ir::Entry w = g.add_param("conv.weight", {Shape{4, 3, 3, 3}, DType::kFloat32});
  std::vector<ir::Entry> conv_in{x, w};
  if (conv_bias) conv_in.push_back(g.add_param("conv.bias", {Shape{4}, DType::kFloat32}));
  ConvolutionAttrs c;
  c.kernel = Shape{3, 3};
  c.num_filter = 4;
  c.no_bias = !conv_bias;
  ir::Entry y = g.add_op(OpId::kConvolution, OpAttrs::make(c), conv_in, "conv")[0];
  std::vector<ir::Entry> bn_in{y};
  for (const char* p : {"bn.gamma", "bn.beta"}) bn_in.push_back(g.add_param(p, {Shape{4}, DType::kFloat32}));
  for (const char* p : {"bn.running_mean", "bn.running_var"})
    bn_in.push_back(g.add_param(p, {Shape{4}, DType::kFloat32}, true));
  BatchNormAttrs b;
  b.fix_gamma = fix_gamma;
  b.eps = 1e-5;
  auto bn = g.add_op(OpId::kBatchNorm, OpAttrs::make(b), bn_in, "bn");
  ir::Entry out = g.add_op(OpId::kRelu, {}, {&bn[0], 1}, "relu")[0];
  std::vector<ir::Entry> outputs{out};
  if (read_mean) outputs.push_back(bn[1]);
  g.set_outputs(outputs);
  return g;
}

int count_ops(const ir::Graph& g, OpId op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.is_op() && node.op == op;
  return n;
}

void expect_same_outputs(const ir::Graph& before, const ir::Graph& after) {
  Bindings bound = kiln::testing::random_bindings(before, 3);
  bound["bn.running_var"] = nd::random::uniform({4}, 0.5, 2);  // variances are positive
  auto want = kiln::testing::eval_graph(before, bound);
  auto got = kiln::testing::eval_graph(after, bound);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    auto w = want[i].to_vector<float>(), v = got[i].to_vector<float>();
    ASSERT_EQ(w.size(), v.size());
    for (size_t k = 0; k < w.size(); ++k) ASSERT_NEAR(v[k], w[k], 1e-4 * (1 + std::abs(w[k]))) << "element " << k;
  }
}

TEST(FoldBatchNorm, FoldsIntoConvolutionInPredictMode) {
  for (bool bias : {false, true}) {
    for (bool fix_gamma : {false, true}) {
      ir::Graph before = conv_bn(bias, fix_gamma);
      PassContext ctx;
      ir::Graph after = run_pass("fold-batch-norm", before, ctx);
      EXPECT_EQ(count_ops(after, OpId::kBatchNorm), 0) << after.to_text();
      EXPECT_EQ(count_ops(after, OpId::kConvolution), 1);
      EXPECT_EQ(ctx.stats.back().rewritten, 1);
      expect_same_outputs(before, after);
    }
  }
}

TEST(FoldBatchNorm, LeavesTrainModeAndReadStatisticsAlone) {
  PassContext train;
  train.options.train_mode = true;
  ir::Graph g = conv_bn(true, false);
  EXPECT_EQ(count_ops(run_pass("fold-batch-norm", g, train), OpId::kBatchNorm), 1);
  PassContext predict;
  EXPECT_EQ(count_ops(run_pass("fold-batch-norm", conv_bn(true, false, true), predict), OpId::kBatchNorm), 1);
}

TEST(FoldBatchNorm, FoldsIntoFullyConnected) {
  ir::Graph g;
  ir::Entry x = g.add_input("data", {Shape{3, 5}, DType::kFloat32});
  ir::Entry w = g.add_param("fc.weight", {Shape{4, 5}, DType::kFloat32});
  ir::Entry b = g.add_param("fc.bias", {Shape{4}, DType::kFloat32});
  ir::Entry y = g.add_op(OpId::kFullyConnected, OpAttrs::make(FullyConnectedAttrs{.num_hidden = 4}), std::vector{x, w, b},
                         "fc")[0];
  std::vector<ir::Entry> bn_in{y};
  for (const char* p : {"bn.gamma", "bn.beta"}) bn_in.push_back(g.add_param(p, {Shape{4}, DType::kFloat32}));
  for (const char* p : {"bn.running_mean", "bn.running_var"})
    bn_in.push_back(g.add_param(p, {Shape{4}, DType::kFloat32}, true));
  BatchNormAttrs a;
  a.fix_gamma = false;
  g.set_outputs({g.add_op(OpId::kBatchNorm, OpAttrs::make(a), bn_in, "bn")[0]});
  PassContext ctx;
  ir::Graph after = run_pass("fold-batch-norm", g, ctx);
  EXPECT_EQ(count_ops(after, OpId::kBatchNorm), 0);
  expect_same_outputs(g, after);
}

}  // namespace
}  // namespace kiln::passes
