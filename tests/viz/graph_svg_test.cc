// Graph pictures: passes::to_dot laid out by Graphviz (frontend/viz/graph_svg.h).
#include "frontend/viz/graph_svg.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "ir/ops/fused.h"
#include "passes/dot.h"
#include "passes/pass.h"
#include "tests/test_util.h"
#include "tests/viz/svg_check.h"

namespace kiln::viz {
namespace {

// A layer with parameters, then a chain that fuse-elementwise turns into one
// node, with a second output read from inside the group.
constexpr const char* kGraph = R"IR(graph {
  %x = input f32[4,5]
  %w = param f32[5,5]
  %bias = param f32[5]
  %fc = FullyConnected(%x, %w, %bias) {num_hidden="5"} : f32[4,5]
  %a = exp(%fc) : f32[4,5]
  %b = _mul_scalar(%a) {scalar="2"} : f32[4,5]
  %c = Activation(%b) {act_type="relu"} : f32[4,5]
  %d = _rminus_scalar(%c) {scalar="1"} : f32[4,5]
  return %d, %b
}
)IR";

ir::Graph fused_graph(const ir::Graph& g) {
  passes::PassContext ctx;
  return passes::run_pipeline(g, "fuse-elementwise", ctx);
}

TEST(GraphSvg, OneNodePerGraphNodeAndOutputWithStableIds) {
  ir::Graph g = ir::parse_graph(kGraph);
  test::SvgDoc doc = test::parse_and_render(dot_to_svg(passes::to_dot(g)), "graph_plain");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:g[@class='node']"), static_cast<int>(g.size() + g.outputs().size()));
  std::vector<std::string> want;
  for (const ir::Node& n : g.nodes()) want.push_back(n.name);
  want.insert(want.end(), {"output#0", "output#1"});
  std::vector<std::string> ids = doc.strings("//s:g[@class='node']/@id");
  std::ranges::sort(want);
  std::ranges::sort(ids);
  EXPECT_EQ(ids, want);
  // Each op node shows its op, name, dtype and shape.
  EXPECT_EQ(doc.strings("//s:g[@id='fc']/s:text"), (std::vector<std::string>{"FullyConnected", "fc", "f32[4,5]"}));
  EXPECT_EQ(doc.count("//s:g[@class='edge']"), 9);  // 3 into fc, 4 along the chain, 2 to the outputs
}

TEST(GraphSvg, CollapsedParamsAreCountedOnTheirOp) {
  ir::Graph g = ir::parse_graph(kGraph);
  test::SvgDoc doc =
      test::parse_and_render(dot_to_svg(passes::to_dot(g, {.collapse_params = true})), "graph_collapsed");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:g[@class='node']"), static_cast<int>(g.size() - 2 + g.outputs().size()));
  EXPECT_EQ(doc.count("//s:g[@id='w' or @id='bias']"), 0);
  EXPECT_EQ(doc.strings("//s:g[@id='fc']/s:text[4]"), std::vector<std::string>{"+ 2 params (30 values)"});
}

TEST(GraphSvg, AFusedGroupIsAClusterOfItsInstructions) {
  ir::Graph g = fused_graph(ir::parse_graph(kGraph));
  const ir::Node* fused = nullptr;
  for (const ir::Node& n : g.nodes())
    if (n.is_op() && n.op == OpId::kFusedElemwise) fused = &n;
  ASSERT_NE(fused, nullptr) << g.to_text();
  size_t instrs = fused->attrs.as<FusedElemwiseAttrs>().program.program().instrs.size();
  ASSERT_EQ(instrs, 4u);
  test::SvgDoc doc = test::parse_and_render(dot_to_svg(passes::to_dot(g)), "graph_fused");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:g[@class='cluster']"), 1);
  // Graph nodes but the fused one, its instructions, the outputs.
  EXPECT_EQ(doc.count("//s:g[@class='node']"), static_cast<int>(g.size() - 1 + instrs + g.outputs().size()));
  EXPECT_EQ(doc.strings("//s:g[@class='node' and starts-with(@id, '" + fused->name + "#')]/s:text"),
            (std::vector<std::string>{"exp", "mul 2", "relu", "sub 1"}));
  // Output 1 (b) comes from the instruction that computes it, inside the group.
  EXPECT_EQ(doc.count("//s:g[@class='edge']/s:title[.='" + fused->name + "#1->output#1']"), 1);
}

TEST(GraphSvg, ACollapsedParamOfAFusedGroupIsNamedOnItsInstruction) {
  ir::Graph g = fused_graph(ir::parse_graph(R"IR(graph {
  %x = input f32[4,5]
  %s = param f32[5]
  %a = exp(%x) : f32[4,5]
  %b = broadcast_mul(%a, %s) : f32[4,5]
  return %b
}
)IR"));
  test::SvgDoc doc =
      test::parse_and_render(dot_to_svg(passes::to_dot(g, {.collapse_params = true})), "graph_fused_collapsed");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:g[@class='node']"), 1 + 2 + 1);  // x, exp, mul, the output
  EXPECT_EQ(doc.count("//s:g[@class='node']/s:text[.='+ s']"), 1);
}

TEST(GraphSvg, SideBySideGraphsKeepTheirIdsUnderALabel) {
  ir::Graph before = ir::parse_graph(kGraph);
  ir::Graph after = fused_graph(before);
  passes::LabelledGraph both[] = {{"traced", &before}, {"optimized", &after}};
  std::string svg = dot_to_svg(passes::to_dot_side_by_side(both));
  test::SvgDoc doc = test::parse_and_render(svg, "graph_side_by_side");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:g[@class='node' and starts-with(@id, 'traced:')]"),
            static_cast<int>(before.size() + before.outputs().size()));
  EXPECT_EQ(doc.count("//s:g[@class='cluster' and (@id='cluster traced' or @id='cluster optimized')]"), 2);
  EXPECT_EQ(doc.count("//s:g[@id='traced:fc']"), 1);
  EXPECT_EQ(doc.count("//s:g[@id='optimized:fc']"), 1);
  // The same input draws the same picture.
  EXPECT_EQ(dot_to_svg(passes::to_dot_side_by_side(both)), svg);
}

TEST(GraphSvg, TextGraphvizCannotReadIsAnError) {
  auto msg = test::error_of<ValueError>([] { dot_to_svg("digraph { a -> }"); });
  EXPECT_NE(msg.find("Graphviz could not read the graph"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln::viz
