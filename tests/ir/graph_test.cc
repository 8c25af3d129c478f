// The graph IR: building, the text form round trip, verification.
#include <gtest/gtest.h>

#include "ir/graph.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/matrix.h"

namespace kiln::ir {
namespace {

Graph sample_graph() {
  Graph g;
  Entry x = g.add_input("data", {Shape{2, 4}, DType::kFloat32});
  Entry b = g.add_param("bias", {Shape{4}, DType::kFloat32});
  Entry s = g.add_op(OpId::kBroadcastAdd, {}, std::vector<Entry>{x, b})[0];
  SplitAttrs split;
  split.num_outputs = 2;
  split.axis = 1;
  auto parts = g.add_op(OpId::kSplit, OpAttrs::make(split), std::vector<Entry>{s}, "parts");
  Entry e = g.add_op(OpId::kExp, {}, std::vector<Entry>{parts[1]})[0];
  ScalarAttrs sc;
  sc.scalar = 0.5;
  Entry y = g.add_op(OpId::kMulScalar, OpAttrs::make(sc), std::vector<Entry>{e}, "y")[0];
  g.set_outputs({y, parts[0]});
  return g;
}

TEST(Graph, BuildsWithInferredTypes) {
  Graph g = sample_graph();
  EXPECT_EQ(g.size(), 6u);
  EXPECT_EQ(g.num_ops(), 4);
  EXPECT_EQ(g.type(g.outputs()[0]).shape, (Shape{2, 2}));
  EXPECT_EQ(g.node(*g.find("parts")).num_outputs(), 2);
  EXPECT_NO_THROW(verify(g));
}

TEST(Graph, TextRoundTrip) {
  Graph g = sample_graph();
  std::string text = g.to_text();
  EXPECT_NE(text.find("%parts = SliceChannel(%broadcast_add) {num_outputs=\"2\"} : f32[2,2], f32[2,2]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("exp(%parts#1)"), std::string::npos) << text;
  EXPECT_NE(text.find("return %y, %parts"), std::string::npos) << text;
  Graph back = parse_graph(text);
  EXPECT_EQ(back.to_text(), text);
  EXPECT_NO_THROW(verify(back));
}

TEST(Graph, ParseErrorsNameLineAndColumn) {
  auto error_of = [](std::string_view text) {
    try {
      parse_graph(text);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("graph {\n  %x = input f32[2]\n  %y = frobnicate(%x) : f32[2]\n  return %y\n}").find("line 3"),
            std::string::npos);
  EXPECT_NE(error_of("graph {\n  %y = exp(%x) : f32[2]\n  return %y\n}").find("used before it is defined"),
            std::string::npos);
  std::string msg = error_of("graph {\n  %x = input f32[2]\n  %y = exp(%x) : f32[3]\n  return %y\n}");
  EXPECT_NE(msg.find("infers as f32[2]"), std::string::npos) << msg;
  msg = error_of("graph {\n  %a = input f32[2]\n  %b = input f32[3]\n  %y = elemwise_add(%a, %b)\n  return %y\n}");
  EXPECT_NE(msg.find("line 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2]"), std::string::npos) << msg;
}

TEST(Graph, ShapeErrorsNameTheNode) {
  Graph g;
  Entry a = g.add_input("a", {Shape{2}, DType::kFloat32});
  Entry b = g.add_input("b", {Shape{3}, DType::kFloat32});
  try {
    g.add_op(OpId::kElemwiseAdd, {}, std::vector<Entry>{a, b}, "sum0");
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'sum0'"), std::string::npos) << e.what();
  }
}

TEST(Graph, VerifierCatchesBrokenGraphs) {
  Graph g = sample_graph();
  Graph bad = g;
  bad.mutable_node(*bad.find("y")).inputs[0] = {static_cast<NodeId>(bad.size()), 0};  // a later node
  EXPECT_THROW(verify(bad), InternalError);
  bad = g;
  bad.mutable_node(*bad.find("y")).types[0].shape = Shape{7};
  EXPECT_THROW(verify(bad), InternalError);
  bad = g;
  bad.set_outputs({{99, 0}});
  EXPECT_THROW(verify(bad), InternalError);
}

}  // namespace
}  // namespace kiln::ir
