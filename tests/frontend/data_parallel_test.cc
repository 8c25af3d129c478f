// Data parallelism in one process: split_and_load / split_batch, and the
// Trainer aggregating gradients through a KVStore. The central check: LeNet
// trained on [cpu(0), cpu(1)] with global batch B ends with the same
// parameters as on one device with batch B, for every store type,
// hybridized or not, with even and uneven splits.
#include <gtest/gtest.h>

#include "tests/data_parallel_util.h"
#include "tests/test_util.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/kvstore.h"
#include "frontend/nd.h"
#include "frontend/nn/nn.h"
#include "frontend/split.h"
#include "frontend/train/loss.h"
#include "frontend/train/trainer.h"
#include "models/zoo.h"
#include "runtime/engine.h"
#include "runtime/profiler.h"

namespace kiln {
namespace {

using test::error_of;

const Device kCpu0 = Device::cpu(0), kCpu1 = Device::cpu(1), kCpu2 = Device::cpu(2);

// ---- split_and_load

TEST(SplitAndLoad, BalancedShardsOnTheirDevices) {
  EXPECT_EQ(split_sizes(7, 3), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(split_sizes(8, 2, true), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(split_sizes(1, 4), (std::vector<int64_t>{1}));  // empty shards are not made
  EXPECT_CONTAINS(error_of<ValueError>([] { split_sizes(7, 2, true); }), "even_split = false");
  EXPECT_THROW(split_sizes(0, 2), ValueError);

  auto x = nd::arange(14).reshape({7, 2});
  auto parts = split_and_load(x, {kCpu0, kCpu1, kCpu2});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].device(), kCpu0);
  EXPECT_EQ(parts[1].device(), kCpu1);
  EXPECT_EQ(parts[2].device(), kCpu2);
  EXPECT_EQ(parts[0].to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(parts[1].to_vector<float>(), (std::vector<float>{6, 7, 8, 9}));
  EXPECT_EQ(parts[2].to_vector<float>(), (std::vector<float>{10, 11, 12, 13}));
  EXPECT_EQ(parts[2].shape(), (Shape{2, 2}));

  auto one = split_and_load(nd::ones({1, 3}), {kCpu0, kCpu1});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].shape(), (Shape{1, 3}));

  auto [xs, ys] = split_batch(x, nd::arange(7), {kCpu1, kCpu0});
  ASSERT_EQ(ys.size(), 2u);
  EXPECT_EQ(ys[0].device(), kCpu1);
  EXPECT_EQ(ys[1].to_vector<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_THROW(split_batch(x, nd::arange(6), {kCpu0, kCpu1}), ShapeError);
}

TEST(SplitAndLoad, ShardsOfAViewFollowTheView) {
  auto x = nd::arange(12).reshape({6, 2});
  auto row = x.at(3).reshape({1, 2});  // a view at a byte offset
  auto parts = split_and_load(row, {kCpu1});
  EXPECT_EQ(parts[0].to_vector<float>(), (std::vector<float>{6, 7}));
}

// ---- Trainer over several devices

using test::RunResult;
using test::expect_same_params;
using test::train_lenet;

struct DpCase {
  std::string kvstore;
  bool hybridize;
  int64_t batch;
  friend void PrintTo(const DpCase& c, std::ostream* os) {
    *os << c.kvstore << (c.hybridize ? " hybridized" : " imperative") << " batch " << c.batch;
  }
};

class DataParallelLeNet : public ::testing::TestWithParam<DpCase> {};

TEST_P(DataParallelLeNet, TwoDevicesMatchOneDevice) {
  const DpCase& c = GetParam();
  const std::vector<Device> two = {kCpu0, kCpu1};
  RunResult one = train_lenet({kCpu0}, "auto", c.hybridize, c.batch, 3);
  RunResult many = train_lenet(two, c.kvstore, c.hybridize, c.batch, 3);
  expect_same_params(one, many, two);
}

INSTANTIATE_TEST_SUITE_P(Stores, DataParallelLeNet,
                         ::testing::Values(DpCase{"local", false, 8}, DpCase{"device", false, 8},
                                           DpCase{"auto", false, 8}, DpCase{"local", true, 8},
                                           DpCase{"device", true, 8}, DpCase{"device", false, 7},
                                           DpCase{"local", true, 7}, DpCase{"device", false, 1}),
                         [](const auto& info) {
                           return fmt::format("{}_{}_b{}", info.param.kvstore,
                                              info.param.hybridize ? "hybrid" : "eager", info.param.batch);
                         });

// The comparison above can fail: without aggregation ("none"), each copy
// follows its own half of the batch.
TEST(DataParallel, WithoutAggregationTheCopiesDiverge) {
  const std::vector<Device> two = {kCpu0, kCpu1};
  RunResult one = train_lenet({kCpu0}, "auto", false, 8, 2);
  RunResult many = train_lenet(two, "none", false, 8, 2);
  double worst = 0;
  for (const auto& [key, want] : one.params) {
    const auto& got = many.params.at(key.substr(0, key.find('@')) + "@cpu(1)");
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
  }
  EXPECT_GT(worst, 1e-3);
}

// Aggregation overlaps an imperative backward only if each parameter's
// gradient buffer is written as soon as its gradient is known: the write of
// the last layer's gradient must be queued before the first layer's backward
// ops (it used to come after the whole walk). It runs under the naive engine
// only (CTest's data_parallel_gradient_order_naive_engine), which runs ops in
// the order they are queued; the threaded engine runs them as they become
// ready, where the check would pass whatever the queue order.
TEST(DataParallel, ImperativeBackwardWritesEachGradientRightBehindItsProducer) {
  if (engine::get().kind() != engine::Kind::kNaive) {
    GTEST_SKIP() << "exact under the naive engine only (KILN_ENGINE=naive; CTest runs it so)";
  }
  nn::HybridSequential net;
  net.add(nn::Dense(32, "relu"), nn::Dense(32, "relu"), nn::Dense(4));
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({16, 8});
  net(x).wait_to_read();
  NDArray loss;
  {
    autograd::Record record;
    loss = nd::sum(nd::square(net(x)));
  }
  loss.wait_to_read();
  const bool was_on = profiler::enabled();
  if (!was_on) profiler::start();
  const size_t before = profiler::events().size();
  autograd::backward({loss});
  engine::wait_all();
  std::vector<profiler::Event> events = profiler::events();
  if (!was_on) profiler::stop();
  events.erase(events.begin(), events.begin() + static_cast<std::ptrdiff_t>(before));
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  // The writes are `_copy` ops; everything else is the backward pass itself.
  int64_t first_write = -1, last_backward = -1;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].name == "_copy") {
      if (first_write < 0) first_write = static_cast<int64_t>(i);
    } else {
      last_backward = static_cast<int64_t>(i);
    }
  }
  ASSERT_GE(first_write, 0);
  ASSERT_GE(last_backward, 0);
  EXPECT_LT(first_write, last_backward) << "every gradient was written after the whole backward pass";
}

TEST(DataParallel, AutoPicksDeviceStoreForSeveralDevicesAndNoneForOne) {
  for (int n : {1, 2}) {
    std::vector<Device> devices;
    for (int i = 0; i < n; ++i) devices.push_back(Device::cpu(i));
    nn::Dense fc(2, "", true, true, 3);
    fc.initialize(init::One(), devices);
    Trainer trainer(fc.collect_params(), optim::SGD({.lr = 0.1}));
    auto xs = split_and_load(nd::ones({4, 3}), devices);
    std::vector<NDArray> ys;
    {
      autograd::Record r;
      for (auto& x : xs) ys.push_back(fc(x));
    }
    autograd::backward(ys);
    trainer.step(4);
    if (n == 1) {
      EXPECT_EQ(trainer.kvstore(), nullptr);
    } else {
      ASSERT_NE(trainer.kvstore(), nullptr);
      EXPECT_EQ(trainer.kvstore()->type(), "device");
    }
    // d/dw of sum(fc(x)) over 4 rows of ones is 4 per weight; rescaled by 1/4.
    for (Device d : devices) EXPECT_EQ(fc.weight().data(d).to_vector<float>(), std::vector<float>(6, 0.9f));
  }
}

TEST(DataParallel, AllreduceGradsGivesEveryCopyTheSumThenUpdate) {
  nn::Dense fc(2, "", true, true, 3);
  fc.initialize(init::One(), {kCpu0, kCpu1, kCpu2});
  Trainer trainer(fc.collect_params(), optim::SGD({.lr = 0.1}), "local");
  auto xs = split_and_load(nd::ones({5, 3}), {kCpu0, kCpu1, kCpu2});  // 2 + 2 + 1 rows
  std::vector<NDArray> ys;
  {
    autograd::Record r;
    for (auto& x : xs) ys.push_back(fc(x));
  }
  autograd::backward(ys);
  trainer.allreduce_grads();
  for (Device d : {kCpu0, kCpu1, kCpu2}) EXPECT_EQ(fc.weight().grad(d).to_vector<float>(), std::vector<float>(6, 5.0f));
  trainer.update(5);
  for (Device d : {kCpu0, kCpu1, kCpu2}) EXPECT_EQ(fc.weight().data(d).to_vector<float>(), std::vector<float>(6, 0.9f));
}

// BatchNorm on several devices: each device normalizes its own shard and
// keeps its own running statistics (no SyncBatchNorm); the learned gamma and
// beta stay equal across the copies.
TEST(DataParallel, BatchNormKeepsPerDeviceStatistics) {
  nn::HybridSequential net;
  nn::BatchNorm bn;
  net.add(nn::Dense(4, "", true, true, 3), bn);
  net.initialize(init::Xavier(), {kCpu0, kCpu1});
  Trainer trainer(net.collect_params(), optim::SGD({.lr = 0.1}));
  std::vector<float> rows(8 * 3);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i < 12 ? i : 3 * i);  // shards differ
  auto xs = split_and_load(nd::array(rows, {8, 3}), {kCpu0, kCpu1});
  std::vector<NDArray> ys;
  {
    autograd::Record r;
    for (auto& x : xs) ys.push_back(net(x));
  }
  autograd::backward(ys);
  trainer.step(8);
  EXPECT_NE(bn.running_mean().data(kCpu0).to_vector<float>(), bn.running_mean().data(kCpu1).to_vector<float>());
  EXPECT_EQ(bn.gamma().data(kCpu0).to_vector<float>(), bn.gamma().data(kCpu1).to_vector<float>());
}

TEST(DataParallel, ParametersWithoutGradientAreNamed) {
  nn::Dense used(2, "", true, true, 3), unused(2, "", true, true, 3);
  used.initialize(init::One(), {kCpu0, kCpu1});
  unused.initialize(init::One(), {kCpu0, kCpu1});
  auto params = used.collect_params();
  for (const auto& [name, p] : unused.collect_params()) params.insert("unused." + name, p);
  Trainer trainer(params, optim::SGD({.lr = 0.1}));
  auto run = [&] {
    auto xs = split_and_load(nd::ones({4, 3}), {kCpu0, kCpu1});
    std::vector<NDArray> ys;
    {
      autograd::Record r;
      for (auto& x : xs) ys.push_back(used(x));
    }
    autograd::backward(ys);
  };
  run();
  std::string e = error_of<ValueError>([&] { trainer.step(4); });
  EXPECT_CONTAINS(e, "unused.weight");
  EXPECT_CONTAINS(e, "unused.bias");
  EXPECT_EQ(e.find("'weight'"), std::string::npos) << e;  // the used layer is fine
  // Nothing was consumed by the failed step: skipping the stale ones works.
  trainer.step(4, /*ignore_stale_grad=*/true);
  EXPECT_EQ(used.weight().data(kCpu1).to_vector<float>(), std::vector<float>(6, 0.9f));
  EXPECT_EQ(unused.weight().data(kCpu1).to_vector<float>(), std::vector<float>(6, 1.0f));
  // A step without a new backward: every gradient is stale now.
  EXPECT_THROW(trainer.step(4), ValueError);
}

// ---- dist_sync: two processes under mpirun

// Each rank writes "key count\n" then the floats, for every parameter copy.
void write_result(const RunResult& r, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& [key, v] : r.params) {
    out << key << " " << v.size() << "\n";
    out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  }
}

RunResult read_result(const std::string& path) {
  RunResult r;
  std::ifstream in(path, std::ios::binary);
  std::string key;
  size_t n = 0;
  while (in >> key >> n) {
    in.get();
    std::vector<float> v(n);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
    r.params[key] = std::move(v);
  }
  return r;
}

// Run by TwoProcessesMatchOneProcess through mpirun; skipped otherwise.
TEST(DistSync, Worker) {
  const char* out = std::getenv("KILN_DP_DIST_OUT");
  if (out == nullptr || !kv::launched_under_mpi()) GTEST_SKIP() << "a worker of DistSync.TwoProcessesMatchOneProcess";
  int rank = std::atoi(std::getenv("OMPI_COMM_WORLD_RANK"));
  int world = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE"));
  // auto: dist_sync. Eager with B = 8 (2 + 2 rows per process), hybridized
  // with B = 7 (2 + 2 and 2 + 1).
  write_result(train_lenet({kCpu0, kCpu1}, "auto", false, 8, 3, rank, world),
               fmt::format("{}/eager_rank{}.bin", out, rank));
  write_result(train_lenet({kCpu0, kCpu1}, "auto", true, 7, 3, rank, world),
               fmt::format("{}/hybrid_rank{}.bin", out, rank));
}

// Run by AStuckProcessTimesOutNamingTheKey: rank 1 stops taking part after
// one step (as a process stuck elsewhere would).
TEST(DistSync, StuckWorker) {
  if (std::getenv("KILN_DP_DIST_STUCK") == nullptr || !kv::launched_under_mpi()) {
    GTEST_SKIP() << "a worker of DistSync.AStuckProcessTimesOutNamingTheKey";
  }
  int rank = std::atoi(std::getenv("OMPI_COMM_WORLD_RANK"));
  train_lenet({kCpu0}, "auto", false, 4, 1, rank, 2);
  if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
  train_lenet({kCpu0}, "auto", false, 4, 1, rank, 2);
}

TEST(DistSync, AStuckProcessTimesOutNamingTheKey) {
  if (!kv::dist_available()) GTEST_SKIP() << "built without MPI";
  if (kv::launched_under_mpi()) GTEST_SKIP() << "already one of several processes";
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun on PATH";
  namespace fs = std::filesystem;
  fs::path log_path = fs::temp_directory_path() / fmt::format("kiln_dp_stuck_{}.log", ::getpid());
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string cmd = fmt::format(
      "KILN_DP_DIST_STUCK=1 KILN_DIST_TIMEOUT_S=2 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "
      "-x KILN_DP_DIST_STUCK -x KILN_DIST_TIMEOUT_S {} --gtest_filter=DistSync.StuckWorker > {} 2>&1",
      exe, log_path.string());
  auto start = std::chrono::steady_clock::now();
  int rc = std::system(cmd.c_str());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::stringstream log;
  log << std::ifstream(log_path).rdbuf();
  EXPECT_NE(rc, 0) << log.str();
  EXPECT_LT(seconds, 50) << "the job was not aborted early\n" << log.str();
  EXPECT_CONTAINS(log.str(), "rank 0 of 2 has waited");
  EXPECT_CONTAINS(log.str(), "key '");
  fs::remove(log_path);
}

// Open MPI never frees much of what MPI_Init allocates and unloads its
// plugins at MPI_Finalize, so LeakSanitizer reports leaks that are not
// Kiln's, with stacks it cannot resolve (no suppression can name them): the
// sanitizer build runs the MPI worker processes without leak detection; every
// other test process keeps it.
#ifdef KILN_SANITIZE_BUILD
constexpr const char* kMpiWorkerEnv = "ASAN_OPTIONS=${ASAN_OPTIONS}:detect_leaks=0 ";
#else
constexpr const char* kMpiWorkerEnv = "";
#endif

TEST(DistSync, TwoProcessesMatchOneProcess) {
  if (!kv::dist_available()) GTEST_SKIP() << "built without MPI";
  if (kv::launched_under_mpi()) GTEST_SKIP() << "already one of several processes";
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun on PATH";
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fmt::format("kiln_dp_dist_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string cmd = fmt::format(
      "KILN_DP_DIST_OUT={0} {2}timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x KILN_DP_DIST_OUT {1} "
      "--gtest_filter=DistSync.Worker > {0}/log 2>&1",
      dir.string(), exe, kMpiWorkerEnv);
  int rc = std::system(cmd.c_str());
  std::stringstream log;
  log << std::ifstream(dir / "log").rdbuf();
  ASSERT_EQ(rc, 0) << cmd << "\n" << log.str();
  for (bool hybrid : {false, true}) {
    RunResult one = train_lenet({kCpu0}, "auto", false, hybrid ? 7 : 8, 3);
    for (int rank = 0; rank < 2; ++rank) {
      std::string name = fmt::format("{}_rank{}.bin", hybrid ? "hybrid" : "eager", rank);
      RunResult got = read_result((dir / name).string());
      ASSERT_FALSE(got.params.empty()) << name << " is empty\n" << log.str();
      SCOPED_TRACE(name);
      expect_same_params(one, got, {kCpu0, kCpu1});
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
