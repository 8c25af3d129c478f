// The pass registry and pipeline runner: parsing, errors, statistics,
// verification and KILN_DUMP_GRAPHS dumps.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "passes/dot.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

const char* kDeadAndRepeated = R"IR(graph {
  %x = input f64[2,3]
  %a = exp(%x) : f64[2,3]
  %b = exp(%x) : f64[2,3]
  %c = elemwise_add(%a, %b) : f64[2,3]
  %unused = tanh(%x) : f64[2,3]
  return %c
}
)IR";

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(PassRegistry, ListsEveryPassSortedAndFindsByName) {
  auto passes = all_passes();
  ASSERT_FALSE(passes.empty());
  for (size_t i = 1; i < passes.size(); ++i) EXPECT_LT(passes[i - 1].name, passes[i].name);
  for (const PassInfo& p : passes) EXPECT_EQ(find_pass(p.name), &p);
  EXPECT_EQ(find_pass("no-such-pass"), nullptr);
  EXPECT_NE(find_pass("eliminate-dead-code"), nullptr);
  EXPECT_NE(find_pass("eliminate-common-expr"), nullptr);
  EXPECT_NE(find_pass("plan-memory"), nullptr);
}

TEST(PassRegistry, ParsesPipelinesWithSpaces) {
  auto p = parse_pipeline(" eliminate-common-expr , eliminate-dead-code,plan-memory ");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0]->name, "eliminate-common-expr");
  EXPECT_EQ(p[2]->name, "plan-memory");
  EXPECT_TRUE(parse_pipeline("").empty());
}

TEST(PassRegistry, UnknownPassListsTheKnownOnes) {
  try {
    parse_pipeline("eliminate-dead-code,fold-everything");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("unknown pass 'fold-everything' at position 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("eliminate-dead-code"), std::string::npos) << msg;
    EXPECT_NE(msg.find("plan-memory"), std::string::npos) << msg;
  }
  EXPECT_THROW(parse_pipeline("eliminate-dead-code,,plan-memory"), ValueError);
  ir::Graph g = ir::parse_graph(kDeadAndRepeated);
  PassContext ctx(PassOptions{});
  EXPECT_THROW(run_pipeline(g, "eliminate-dead-code,nope", ctx), ValueError);
  EXPECT_TRUE(ctx.stats.empty()) << "nothing runs when a name is wrong";
}

TEST(PassRegistry, RunsPipelineAndRecordsStatistics) {
  ir::Graph g = ir::parse_graph(kDeadAndRepeated);
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pipeline(g, "eliminate-common-expr,eliminate-dead-code,plan-memory", ctx);
  ASSERT_EQ(ctx.stats.size(), 3u);
  EXPECT_EQ(ctx.stats[0].pass, "eliminate-common-expr");
  EXPECT_TRUE(ctx.stats[0].changed);
  EXPECT_EQ(ctx.stats[0].merged, 1);
  EXPECT_EQ(ctx.stats[0].ops_before, 4);
  EXPECT_EQ(ctx.stats[0].ops_after, 3);
  EXPECT_EQ(ctx.stats[1].removed, 1);
  EXPECT_EQ(ctx.stats[1].nodes_after, 3);
  EXPECT_FALSE(ctx.stats[2].changed);
  EXPECT_EQ(ctx.stats[2].naive_bytes, 64);  // exp: 48 bytes rounded to 64; the add is an output
  ASSERT_TRUE(ctx.memory_plan.has_value());
  EXPECT_EQ(out.num_ops(), 2);
  std::string report = ctx.report();
  EXPECT_NE(report.find("1 merged"), std::string::npos) << report;
  EXPECT_NE(report.find("1 removed"), std::string::npos) << report;
  EXPECT_NE(report.find("arena 64 B vs naive 64 B"), std::string::npos) << report;
  // The input graph is left as it was.
  EXPECT_EQ(g.to_text(), kDeadAndRepeated);
}

ir::Graph broken_pass(const ir::Graph& g, PassContext& ctx) {
  ir::Graph out = g;
  out.mutable_node(1).types[0].shape = Shape{7};  // records a type its inference disagrees with
  ctx.current().changed = true;
  return out;
}

ir::Graph quietly_broken_pass(const ir::Graph& g, PassContext&) {
  ir::Graph out = g;
  out.mutable_node(1).types[0].shape = Shape{7};  // and does not say it changed anything
  return out;
}

TEST(PassRegistry, VerifierRunsAfterAPassThatChangedTheGraph) {
  ir::Graph g = ir::parse_graph(kDeadAndRepeated);
  PassContext ctx(PassOptions{});
  try {
    run_pass(PassInfo{"broken", &broken_pass}, g, ctx);
    FAIL() << "the verifier did not run";
  } catch (const InternalError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("after pass broken"), std::string::npos) << msg;
    EXPECT_NE(msg.find("node 'a'"), std::string::npos) << msg;
  }
  // Only after changing passes (that is what makes it cheap), and not when switched off.
  EXPECT_NO_THROW(run_pass(PassInfo{"quiet", &quietly_broken_pass}, g, ctx));
  PassOptions off;
  off.verify = false;
  PassContext ctx_off(off);
  EXPECT_NO_THROW(run_pass(PassInfo{"broken", &broken_pass}, g, ctx_off));
}

ir::Graph cleanup_pass(const ir::Graph& g, PassContext& ctx) {
  ir::Graph out = run_pipeline(g, "eliminate-common-expr,eliminate-dead-code", ctx);
  ctx.current().changed = out.size() != g.size();
  ctx.current().removed = static_cast<int64_t>(g.size() - out.size());
  return out;
}

TEST(PassRegistry, PassesMayRunPassesAndStatisticsStayWithTheirPass) {
  PassContext ctx(PassOptions{});
  ir::Graph out = run_pass(PassInfo{"cleanup", &cleanup_pass}, ir::parse_graph(kDeadAndRepeated), ctx);
  ASSERT_EQ(ctx.stats.size(), 3u);
  EXPECT_EQ(ctx.stats[0].pass, "cleanup");
  EXPECT_EQ(ctx.stats[0].removed, 2);
  EXPECT_EQ(ctx.stats[0].nodes_before, 5);
  EXPECT_EQ(ctx.stats[0].nodes_after, 3);
  EXPECT_EQ(ctx.stats[1].merged, 1);
  EXPECT_EQ(ctx.stats[2].removed, 1);
  // A pass called directly records into a "?" entry.
  PassContext direct(PassOptions{});
  cleanup_pass(ir::parse_graph(kDeadAndRepeated), direct);
  EXPECT_EQ(direct.stats.back().pass, "?");
}

TEST(PassRegistry, DumpsEveryPassAsTextAndDot) {
  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("kiln_dump_{}", ::testing::UnitTest::GetInstance()->random_seed());
  std::filesystem::remove_all(dir);
  ::setenv("KILN_DUMP_GRAPHS", dir.c_str(), 1);
  PassContext ctx;
  ::unsetenv("KILN_DUMP_GRAPHS");
  EXPECT_EQ(ctx.options.dump_dir, dir.string());
  ir::Graph g = ir::parse_graph(kDeadAndRepeated);
  ir::Graph out = run_pipeline(g, "eliminate-common-expr,eliminate-dead-code", ctx);
  EXPECT_EQ(read_file(dir / "00-input.txt"), g.to_text());
  EXPECT_EQ(read_file(dir / "02-eliminate-dead-code.txt"), out.to_text());
  ir::Graph back = ir::parse_graph(read_file(dir / "01-eliminate-common-expr.txt"));
  EXPECT_EQ(back.num_ops(), 3);
  std::string dot = read_file(dir / "02-eliminate-dead-code.dot");
  EXPECT_EQ(dot, to_dot(out));
  EXPECT_EQ(dot.rfind("digraph kiln {", 0), 0u) << dot;
  EXPECT_NE(dot.find("label=\"exp\\na\\nf64[2,3]\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("-> \"output#0\""), std::string::npos) << dot;
  int files = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(f.path().string().find(".tmp."), std::string::npos) << "temporary file left: " << f.path();
  }
  EXPECT_EQ(files, 6);
  std::filesystem::remove_all(dir);
}

TEST(PassRegistry, NoDumpsWithoutTheVariable) {
  ::unsetenv("KILN_DUMP_GRAPHS");
  PassContext ctx;
  EXPECT_TRUE(ctx.options.dump_dir.empty());
}

}  // namespace
}  // namespace kiln::passes
