// The `kiln` program's pictures end to end: kiln plot, kiln inspect --svg,
// kiln profile. Runs the program (KILN_CLI_PATH) on files in the repository
// (tests/data/viz, the MTCNN det1 export); each SVG is checked as the
// library tests check theirs.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "frontend/atomic_file.h"
#include "frontend/data/fashion_mnist.h"
#include "frontend/viz/nice_scale.h"
#include "frontend/viz/train_log.h"
#include "frontend/formats/mxnet/symbol_json.h"
#include "passes/fuse_elementwise.h"
#include "passes/pass.h"
#include "tests/viz/svg_check.h"

extern char** environ;

namespace kiln::viz {
namespace {

namespace fs = std::filesystem;

const std::string kData = KILN_TEST_DATA_DIR;
const std::string kDet1 = kData + "/mxnet-models/mtcnn-det1-legacy";

struct Result {
  int status = -1;
  std::string out, err;
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs `kiln args...`, stdout and stderr to files under the test directory.
Result kiln(const std::vector<std::string>& args) {
  fs::path dir = test::test_tmp_dir();
  fs::path out = dir / "cli.out", err = dir / "cli.err";
  std::vector<std::string> argv_s{KILN_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << KILN_CLI_PATH;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
}

fs::path tmp(const std::string& name) {
  fs::path p = test::test_tmp_dir() / name;
  fs::remove(p);
  return p;
}

TEST(CliPictures, PlotOverlaysRunsWithAxesFromTheLogs) {
  fs::path svg = tmp("cli_plot.svg");
  std::string a = kData + "/viz/mlp_fp32.jsonl", b = kData + "/viz/other_framework.jsonl";
  Result r = kiln({"plot", a, b, "--label", "kiln", "--output", svg.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  test::SvgDoc doc = test::parse_and_render(read_file(svg), "cli_plot");
  ASSERT_TRUE(doc.ok());
  // 2 runs x (loss, train accuracy, test accuracy, images/s).
  EXPECT_EQ(doc.count("//s:path[@class='curve']"), 2 * 4);
  EXPECT_EQ(doc.count("//s:path[@class='curve' and @data-run='kiln']"), 4);
  EXPECT_EQ(doc.count("//s:path[@class='curve' and @data-run='other_framework']"), 4);
  // Each panel's ranges are the nice scale of the logs' values.
  TrainLog la = read_train_log(a), lb = read_train_log(b);
  for (const auto& [panel, key_list] : std::map<std::string, std::vector<std::string>>{
           {"loss", {"loss"}}, {"accuracy", {"train_acc", "test_acc"}}, {"throughput", {"images_per_sec"}}}) {
    double lo = 1e300, hi = -1e300;
    for (const TrainLog* l : {&la, &lb})
      for (const std::string& k : key_list)
        for (double v : l->series.at(k)) lo = std::min(lo, v), hi = std::max(hi, v);
    NiceScale want = nice_scale(lo, hi, 5);
    std::string g = "//s:g[@class='panel' and @data-panel='" + panel + "']";
    EXPECT_DOUBLE_EQ(doc.number(g + "/@data-y-min"), want.lo) << panel;
    EXPECT_DOUBLE_EQ(doc.number(g + "/@data-y-max"), want.hi) << panel;
    EXPECT_DOUBLE_EQ(doc.number(g + "/@data-x-min"), 1) << panel;
    EXPECT_DOUBLE_EQ(doc.number(g + "/@data-x-max"), 4) << panel;
  }
}

TEST(CliPictures, PlotRefusesBadLogsNamingFileAndLine) {
  fs::path svg = tmp("cli_plot_bad.svg");
  Result r = kiln({"plot", kData + "/viz/not_json.jsonl", "-o", svg.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("not_json.jsonl, line 2: not JSON"), std::string::npos) << r.err;
  r = kiln({"plot", kData + "/viz/missing_field.jsonl", "-o", svg.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("missing_field.jsonl, line 2: no field 'test_acc' (line 1 has it)"), std::string::npos) << r.err;
  r = kiln({"plot", kData + "/viz/mlp_fp32.jsonl", kData + "/viz/empty.jsonl", "-o", svg.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("empty.jsonl: the log is empty (no epochs); nothing to plot"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(svg)) << "no picture for a bad log";
  // The picture never replaces a log.
  fs::path log = tmp("cli_plot_log.jsonl");
  fs::copy_file(kData + "/viz/mlp_fp32.jsonl", log);
  r = kiln({"plot", log.string(), "-o", log.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("is one of the logs"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(log), read_file(kData + "/viz/mlp_fp32.jsonl"));
}

TEST(CliPictures, TrainRedrawsItsCurvesEveryEpoch) {
  if (!fs::exists(data::FashionMNIST::default_dir() + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  fs::path svg = tmp("cli_train.svg"), log = tmp("cli_train.jsonl");
  Result r = kiln({"train", "--model", "mlp", "--epochs", "2", "--train-limit", "512", "--test-limit", "256", "--log",
                   log.string(), "--plot", svg.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  test::SvgDoc doc = test::parse_and_render(read_file(svg), "cli_train");
  ASSERT_TRUE(doc.ok());
  // loss, test_loss, train_acc, test_acc, images_per_sec
  EXPECT_EQ(doc.count("//s:path[@class='curve' and @data-run='mlp']"), 5);
  EXPECT_EQ(doc.count("//s:g[@class='panel' and @data-panel='loss']//s:circle"), 4);  // a dot per epoch and curve
  EXPECT_EQ(doc.count("//s:text[@class='title' and starts-with(., 'kiln train: mlp')]"), 1);
  for (const auto& f : fs::directory_iterator(svg.parent_path()))
    EXPECT_EQ(f.path().filename().string().find(std::string("cli_train.svg") + std::string(kTempMarker)),
              std::string::npos)
        << "left behind: " << f.path();
}

// det1's typed graph, as kiln inspect builds it.
ir::Graph det1_graph() {
  std::vector<std::string> inputs{"data"};
  return mxnet::to_graph(mxnet::load_symbol_json(kDet1 + "/det1-symbol.json"), {{"data", {Shape{1, 3, 24, 24}}}}, inputs);
}

TEST(CliPictures, InspectDrawsEveryNodeOfTheGraph) {
  ir::Graph g = det1_graph();
  const int params = static_cast<int>(g.nodes_of_kind(ir::NodeKind::kParam).size());
  const int outputs = static_cast<int>(g.outputs().size());
  fs::path svg = tmp("cli_inspect.svg");
  Result r = kiln({"inspect", kDet1 + "/det1-symbol.json", "--shape", "data=1,3,24,24", "--svg", svg.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  test::SvgDoc doc = test::parse_and_render(read_file(svg), "cli_inspect");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:g[@class='node']"), static_cast<int>(g.size()) + outputs);
  EXPECT_EQ(doc.strings("//s:g[@id='conv1']/s:text"),
            (std::vector<std::string>{"Convolution", "conv1", "f32[1,10,22,22]"}));

  r = kiln({"inspect", kDet1 + "/det1-symbol.json", "--shape", "data=1,3,24,24", "--svg", svg.string(),
            "--collapse-params", "--passes"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("traced: 24 nodes (10 ops)"), std::string::npos) << r.out;
  doc = test::parse_and_render(read_file(svg), "cli_inspect_passes");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:g[@class='node' and starts-with(@id, 'traced:')]"),
            static_cast<int>(g.size()) - params + outputs);
  EXPECT_EQ(doc.count("//s:g[@class='node' and starts-with(@id, 'optimized:')]"),
            static_cast<int>(g.size()) - params + outputs);  // nothing in det1 fuses
}

TEST(CliPictures, InspectWithoutShapesDrawsInputsAndOps) {
  ir::Graph g = det1_graph();
  fs::path svg = tmp("cli_inspect_untyped.svg");
  Result r = kiln({"inspect", kDet1 + "/det1-symbol.json", "--svg", svg.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  test::SvgDoc doc = test::parse_and_render(read_file(svg), "cli_inspect_untyped");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:g[@class='node']"), static_cast<int>(g.num_ops() + 1));  // the ops and `data`
  r = kiln({"inspect", kDet1 + "/det1-symbol.json", "--svg", svg.string(), "--passes"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--passes needs the typed graph"), std::string::npos) << r.err;
}

TEST(CliPictures, InspectDrawsAGraphDumpWithItsFusedGroups) {
  ir::Graph g = ir::parse_graph(R"IR(graph {
  %x = input f32[4,5]
  %a = exp(%x) : f32[4,5]
  %b = _mul_scalar(%a) {scalar="2"} : f32[4,5]
  %c = Activation(%b) {act_type="relu"} : f32[4,5]
  return %c
}
)IR");
  passes::PassContext ctx;
  ir::Graph fused = passes::run_pipeline(g, "fuse-elementwise", ctx);
  fs::path dump = tmp("cli_dump.txt"), svg = tmp("cli_dump.svg");
  std::ofstream(dump) << fused.to_text();
  Result r = kiln({"inspect", dump.string(), "--svg", svg.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Kiln IR, 2 nodes"), std::string::npos) << r.out;
  test::SvgDoc doc = test::parse_and_render(read_file(svg), "cli_dump");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:g[@class='cluster']"), 1);
  EXPECT_EQ(doc.count("//s:g[@class='node']"), 1 + 3 + 1);  // x, three instructions, the output

  std::ofstream(dump) << "graph {\n  %x = input f32[4,5]\n  return %y\n}\n";
  r = kiln({"inspect", dump.string(), "--svg", svg.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("cli_dump.txt: "), std::string::npos) << r.err;
}

TEST(CliPictures, ProfileTableTotalsEqualTheTrace) {
  fs::path trace = tmp("cli_profile.json"), svg = tmp("cli_profile.svg");
  Result r = kiln({"profile", "--trace", trace.string(), "--svg", svg.string(), "--first-ms", "0", "--top", "0", "--",
                   "run", kDet1 + "/det1-symbol.json", kDet1 + "/det1-0001.params", "--input",
                   "data=" + kData + "/cli/det1_input.npy", "--output-prefix", tmp("cli_profile_out").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  // The trace, summed here from its JSON.
  nlohmann::json j = nlohmann::json::parse(read_file(trace));
  std::map<int64_t, std::string> devices;
  std::map<std::pair<int64_t, int64_t>, std::string> lanes;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") devices[e["pid"]] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name") lanes[{e["pid"], e["tid"]}] = e["args"]["name"];
  }
  std::map<std::string, std::pair<double, int64_t>> per_lane;  // "cpu(0) compute" -> (us, events)
  double all_us = 0;
  int64_t all_events = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    auto& [us, n] = per_lane[devices[e["pid"]] + " " + lanes[{e["pid"], e["tid"]}]];
    us += e["dur"].get<double>();
    ++n;
    all_us += e["dur"].get<double>();
    ++all_events;
  }
  ASSERT_GT(all_events, 0);
  EXPECT_NE(r.out.find(fmt::format("all lanes: {} events, {:.3f} ms", all_events, all_us / 1e3)), std::string::npos)
      << r.out;
  for (const auto& [lane, v] : per_lane) {
    // The lane's header, and its total line (nested events included).
    EXPECT_NE(r.out.find(fmt::format("{}: {} events", lane, v.second)), std::string::npos) << lane << "\n" << r.out;
  }
  std::smatch m;
  std::regex total_line(R"(total \(nested events included\) +([0-9.]+) +([0-9]+))");
  double table_us = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), total_line); it != std::sregex_iterator(); ++it)
    table_us += std::stod((*it)[1]) * 1e3;
  EXPECT_NEAR(table_us, all_us, 1.0 * static_cast<double>(per_lane.size()));  // printed to the microsecond

  test::SvgDoc doc = test::parse_and_render(read_file(svg), "cli_profile");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.count("//s:rect[@class='event']"), static_cast<int>(all_events));
  EXPECT_EQ(doc.count("//s:text[@class='lane']"), static_cast<int>(lanes.size()));
}

TEST(CliPictures, ProfileOfAFailingCommandFails) {
  Result r = kiln({"profile", "--trace", tmp("cli_profile_fail.json").string(), "--", "run", "/nonexistent-symbol.json",
                   "/nonexistent.params", "--input", "data=x.npy", "--output", "y.npy"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("the profiled command `kiln run /nonexistent-symbol.json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kiln::viz
