// The profiler: events from engine workers, and the Chrome trace it writes.
#include "runtime/profiler.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <unistd.h>

#include "ir/error.h"
#include "runtime/engine.h"

namespace kiln::profiler {
namespace {

namespace fs = std::filesystem;
using engine::Lane;
using engine::RunContext;

class ProfilerTest : public testing::Test {
 protected:
  void SetUp() override {
    stop();
    clear();
    dir_ = fs::temp_directory_path() / ("kiln_profiler_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    stop();
    clear();
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);  // throws on invalid JSON
}

TEST_F(ProfilerTest, RecordsNothingWhenOff) {
  auto e = engine::create(engine::Kind::kThreaded);
  e->push([](RunContext) {}, {}, {}, {.name = "quiet"});
  e->wait_all();
  EXPECT_FALSE(enabled());
  EXPECT_TRUE(events().empty());
}

TEST_F(ProfilerTest, EngineOpsBecomeEventsWithDeviceAndLane) {
  for (auto kind : {engine::Kind::kThreaded, engine::Kind::kNaive}) {
    clear();
    auto e = engine::create(kind);
    start();
    engine::Var* v = e->new_var();
    e->push([](RunContext) {}, {}, {v}, {.device = Device::cpu(0), .name = "fill", .bytes = 64});
    e->push([](RunContext) {}, {v}, {}, {.device = Device::cpu(1), .lane = Lane::kCopy, .name = "copy_out"});
    e->wait_all();
    stop();
    e->push([](RunContext) {}, {}, {}, {.name = "after_stop"});
    e->wait_all();
    e->delete_var(v);

    std::vector<Event> ev = events();
    ASSERT_EQ(ev.size(), 2u);
    std::map<std::string, Event> by_name;
    for (const Event& x : ev) by_name[x.name] = x;
    ASSERT_TRUE(by_name.count("fill") && by_name.count("copy_out"));
    const Event& fill = by_name["fill"];
    const Event& copy = by_name["copy_out"];
    EXPECT_EQ(fill.device, Device::cpu(0));
    EXPECT_EQ(fill.lane, static_cast<int>(Lane::kCompute));
    EXPECT_EQ(fill.bytes, 64);
    EXPECT_EQ(copy.device, Device::cpu(1));
    EXPECT_EQ(copy.lane, static_cast<int>(Lane::kCopy));
    EXPECT_NE(fill.thread, 0u);
    if (kind == engine::Kind::kThreaded) {
      EXPECT_NE(fill.thread, copy.thread);  // separate workers
    }
    EXPECT_LE(fill.start_ns, fill.end_ns);
    EXPECT_LE(fill.end_ns, copy.start_ns);  // copy_out read what fill wrote
  }
}

TEST_F(ProfilerTest, DumpWritesChromeTraceJson) {
  Event a{"matmul \"big\" \\ \n", Device::cpu(0), 0, 7, 1000, 3500, 128};
  Event b{"copy", Device::cpu(1), 1, 8, 2000, 2600, 0};
  record(a);
  record(b);
  fs::path path = dir_ / "trace.json";
  dump(path.string());
  nlohmann::json j = read_json(path);
  ASSERT_TRUE(j.contains("traceEvents"));
  std::map<std::string, nlohmann::json> complete;
  std::set<std::string> processes, threads;
  for (const auto& x : j["traceEvents"]) {
    if (x["ph"] == "X") complete[x["name"].get<std::string>()] = x;
    if (x["ph"] == "M" && x["name"] == "process_name") processes.insert(x["args"]["name"].get<std::string>());
    if (x["ph"] == "M" && x["name"] == "thread_name") threads.insert(x["args"]["name"].get<std::string>());
  }
  EXPECT_EQ(processes, (std::set<std::string>{"cpu(0)", "cpu(1)"}));
  EXPECT_EQ(threads, (std::set<std::string>{"compute", "copy"}));
  ASSERT_EQ(complete.size(), 2u);
  const auto& m = complete.at(a.name);  // the name survives escaping
  EXPECT_DOUBLE_EQ(m["ts"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(m["dur"].get<double>(), 2.5);
  EXPECT_EQ(m["tid"].get<uint64_t>(), 7u);
  const auto& c = complete.at("copy");
  EXPECT_NE(c["pid"], m["pid"]);
  EXPECT_EQ(c["tid"].get<uint64_t>(), 8u);
}

TEST_F(ProfilerTest, DumpReplacesTheFileAtomically) {
  fs::path path = dir_ / "trace.json";
  { std::ofstream(path) << "not json at all {"; }
  record(Event{"op", Device::cpu(0), 0, 1, 0, 10, 0});
  dump(path.string());
  EXPECT_NO_THROW(read_json(path));
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  // A failed dump leaves no partial file behind.
  EXPECT_THROW(dump((dir_ / "missing_dir" / "trace.json").string()), IOError);
  EXPECT_FALSE(fs::exists(dir_ / "missing_dir"));
}

TEST_F(ProfilerTest, ClockIsMonotonic) {
  int64_t a = now_ns();
  int64_t b = now_ns();
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace kiln::profiler
