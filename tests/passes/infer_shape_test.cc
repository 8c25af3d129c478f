// infer-shape: new input types flow through every node; errors name the node.
#include <gtest/gtest.h>

#include "passes/infer_shape.h"
#include "tests/passes/eval_graph.h"
#include "tests/passes/random_graph.h"

namespace kiln::passes {
namespace {

const char* kMlp = R"IR(graph {
  %x = input f32[4,5]
  %w1 = param f32[8,5]
  %b1 = param f32[8]
  %fc1 = FullyConnected(%x, %w1, %b1) {num_hidden="8"} : f32[4,8]
  %act = Activation(%fc1) {act_type="relu"} : f32[4,8]
  %s = sum(%act) {axis="(1,)", keepdims="True"} : f32[4,1]
  %y = broadcast_div(%act, %s) : f32[4,8]
  return %y
}
)IR";

TEST(InferShape, NewBatchSizeFlowsThrough) {
  PassOptions opts;
  opts.infer_shape.input_types["x"] = {Shape{32, 5}, DType::kFloat32};
  PassContext ctx(opts);
  ir::Graph out = run_pass("infer-shape", ir::parse_graph(kMlp), ctx);
  const char* after = R"IR(graph {
  %x = input f32[32,5]
  %w1 = param f32[8,5]
  %b1 = param f32[8]
  %fc1 = FullyConnected(%x, %w1, %b1) {num_hidden="8"} : f32[32,8]
  %act = Activation(%fc1) {act_type="relu"} : f32[32,8]
  %s = sum(%act) {axis="(1,)", keepdims="True"} : f32[32,1]
  %y = broadcast_div(%act, %s) : f32[32,8]
  return %y
}
)IR";
  EXPECT_EQ(out.to_text(), after);
  EXPECT_EQ(ctx.stats.back().rewritten, 5);
  EXPECT_TRUE(ctx.stats.back().changed);
}

TEST(InferShape, SameTypesChangeNothing) {
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pass("infer-shape", ir::parse_graph(kMlp), ctx);
  EXPECT_EQ(out.to_text(), kMlp);
  EXPECT_FALSE(ctx.stats.back().changed);
}

TEST(InferShape, DtypeChangesFlowToo) {
  ir::Graph out = retype(ir::parse_graph(kMlp), {{"x", {Shape{4, 5}, DType::kFloat64}},
                                                 {"w1", {Shape{8, 5}, DType::kFloat64}},
                                                 {"b1", {Shape{8}, DType::kFloat64}}});
  EXPECT_EQ(out.type(out.outputs()[0]), (TensorType{Shape{4, 8}, DType::kFloat64}));
}

TEST(InferShape, ErrorsNameTheFirstNodeThatFailsWithItsInputShapes) {
  try {
    retype(ir::parse_graph(kMlp), {{"x", {Shape{4, 7}, DType::kFloat32}}});
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("node 'fc1'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[4,7]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[8,5]"), std::string::npos) << msg;
  }
  EXPECT_THROW(retype(ir::parse_graph(kMlp), {{"nope", {Shape{1}, DType::kFloat32}}}), ValueError);
  EXPECT_THROW(retype(ir::parse_graph(kMlp), {{"fc1", {Shape{1}, DType::kFloat32}}}), ValueError);
}

TEST(InferShape, RandomGraphsAtANewBatchSizeComputeTheSameRows) {
  // Random graphs mix rows only through transpose/Reshape; take those that
  // keep rows separate and check row 0 is the same at batch 2 and batch 5.
  int checked = 0;
  for (uint32_t seed = 1; seed <= 300 && checked < 8; ++seed) {
    ir::Graph g = testing::random_graph(seed, 10);
    bool rowwise = true;
    for (const ir::Node& n : g.nodes())
      rowwise = rowwise && !(n.is_op() && (n.op == OpId::kTranspose || n.op == OpId::kReshape));
    if (!rowwise) continue;
    int64_t batch = g.type({*g.find("x"), 0}).shape[0];
    ir::Graph big =
        retype(g, {{"x", {Shape{batch + 3, 3}, DType::kFloat64}}, {"y", {Shape{batch + 3, 3}, DType::kFloat64}}});
    ir::verify(big);
    auto small_in = testing::random_bindings(g, seed);
    auto big_in = testing::random_bindings(big, seed + 1000);
    for (const char* name : {"x", "y"}) {  // same first rows
      auto v = big_in[name].to_vector<double>();
      auto s = small_in[name].to_vector<double>();
      std::copy(s.begin(), s.end(), v.begin());
      big_in[name] = nd::array(v, big.type({*big.find(name), 0}).shape);
    }
    for (const auto& [name, value] : small_in)
      if (std::string(name) != "x" && std::string(name) != "y") big_in[name] = value;
    auto a = testing::eval_graph(g, small_in);
    auto b = testing::eval_graph(big, big_in);
    for (size_t i = 0; i < a.size(); ++i) {
      auto va = a[i].to_vector<double>();
      auto vb = b[i].to_vector<double>();
      size_t row = static_cast<size_t>(a[i].shape().size() / batch);
      for (size_t k = 0; k < row; ++k) ASSERT_NEAR(va[k], vb[k], 1e-12) << "seed " << seed;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

}  // namespace
}  // namespace kiln::passes
