// The generated symbolic API (ir/sym.h): graphs built by op functions equal
// graphs built with Graph::add_op; attributes as strings or typed structs;
// errors name the op.
#include <gtest/gtest.h>

#include "ir/error.h"
#include "ir/ops/conv.h"
#include "ir/ops/nn.h"
#include "ir/sym.h"
#include "tests/test_util.h"

namespace kiln::ir {
namespace {

using test::error_of;

TensorType f32(Shape s) { return {std::move(s), DType::kFloat32}; }

TEST(Sym, LeNetBlockMatchesAddOp) {
  Graph by_sym, by_add;
  for (Graph* g : {&by_sym, &by_add}) {
    g->add_input("data", f32({2, 1, 28, 28}));
    g->add_param("conv0.weight", f32({20, 1, 3, 3}));
    g->add_param("conv0.bias", f32({20}));
  }
  Entry x{0, 0}, w{1, 0}, b{2, 0};
  Entry c = sym::Convolution(by_sym, {x, w, b}, {{"kernel", "(3, 3)"}, {"num_filter", "20"}}, "conv0");
  Entry r = sym::Activation(by_sym, {c}, ActivationAttrs{.act_type = ActType::kRelu});
  Entry p = sym::Pooling(by_sym, {r}, {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "avg"}});
  by_sym.set_outputs({p});

  Entry c2 = by_add.add_op(OpId::kConvolution,
                           OpAttrs::make(ConvolutionAttrs{.kernel = {3, 3}, .num_filter = 20}), {{x, w, b}}, "conv0")[0];
  Entry r2 = by_add.add_op(OpId::kActivation, OpAttrs::make(ActivationAttrs{.act_type = ActType::kRelu}), {{c2}})[0];
  Entry p2 = by_add.add_op(
      OpId::kPooling, OpAttrs::make(PoolingAttrs{.kernel = {2, 2}, .pool_type = "avg", .stride = {2, 2}}), {{r2}})[0];
  by_add.set_outputs({p2});

  EXPECT_EQ(by_sym.to_text(), by_add.to_text());
  EXPECT_EQ(by_sym.type(p).shape, (Shape{2, 20, 13, 13}));
}

TEST(Sym, MultipleOutputsAndVariadicInputs) {
  Graph g;
  Entry x = g.add_input("data", f32({4, 3, 5, 5}));
  std::vector<Entry> stats;
  for (const char* n : {"gamma", "beta", "mean", "var"}) stats.push_back(g.add_param(n, f32({3}), n[0] == 'm' || n[0] == 'v'));
  auto bn = sym::BatchNorm(g, {x, stats[0], stats[1], stats[2], stats[3]});
  ASSERT_EQ(bn.size(), 3u);
  EXPECT_EQ(Entry(bn), bn[0]);
  EXPECT_EQ(g.type(bn[1]).shape, Shape{3});
  EXPECT_CONTAINS(error_of<ValueError>([&] { (void)bn[3]; }), "output 3 of a node with 3 output(s)");

  Entry s = sym::AddN(g, std::vector<Entry>{bn, x, bn}, {{"num_args", "3"}});
  EXPECT_EQ(g.type(s).shape, (Shape{4, 3, 5, 5}));
  EXPECT_EQ(g.node(s.node).inputs.size(), 3u);
}

TEST(Sym, ErrorsNameTheOp) {
  Graph g;
  Entry x = g.add_input("data", f32({2, 3}));
  EXPECT_CONTAINS(error_of<ValueError>([&] { sym::Activation(g, {x}, {{"act_type", "relu"}, {"bogus", "1"}}); }),
                  "bogus");
  EXPECT_CONTAINS(error_of<ValueError>([&] { sym::Relu(g, {x}, {{"axis", "1"}}); }), "relu takes no attributes");
  // A struct of another op that sets a field this op lacks.
  std::string wrong = error_of<ValueError>([&] { sym::Softmax(g, {x}, ActivationAttrs{.act_type = ActType::kRelu}); });
  EXPECT_CONTAINS(wrong, "softmax");
  EXPECT_CONTAINS(wrong, "act_type");
  // Shape errors come from the graph, naming the node.
  Entry w = g.add_param("w", f32({4, 5}));
  std::string msg = error_of<ShapeError>([&] { sym::FullyConnected(g, {x, w}, {{"num_hidden", "4"}, {"no_bias", "True"}}, "fc"); });
  EXPECT_CONTAINS(msg, "fc");
  EXPECT_CONTAINS(msg, "FullyConnected");
}

}  // namespace
}  // namespace kiln::ir
