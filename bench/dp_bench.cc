// Data-parallel benchmarks: gradient allreduce through the KVStore, and
// LeNet training on two CPU devices against one (the d2l multi-GPU chapter
// in numbers, with cpu(i) standing in for GPUs).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <unistd.h>

#include "bench/bench.h"
#include "frontend/autograd.h"
#include "frontend/kvstore.h"
#include "frontend/nd.h"
#include "frontend/split.h"
#include "frontend/train/loss.h"
#include "frontend/train/trainer.h"
#include "ir/error.h"
#include "models/zoo.h"
#include "runtime/engine.h"
#include "runtime/profiler.h"
#include "runtime/storage.h"

namespace kiln::bench {

namespace {

const Device kCpu0 = Device::cpu(0), kCpu1 = Device::cpu(1);

// ResNet-18's gradients (d2l's, 10 classes: about 11.2 M floats over 62
// arrays) on cpu(0) and cpu(1), summed by a `type` store, every copy
// receiving the sum (Trainer::allreduce_grads's work). Each device gets one
// intra-op thread. Milliseconds, best of `repeat` after a warm-up.
double allreduce_ms(const Options& options, const std::string& type, int64_t* floats) {
  CpuThreadsGuard guard({kCpu0, kCpu1}, 1);
  auto net = models::resnet18(10);
  net.initialize(init::Xavier(), {kCpu0, kCpu1});
  net(nd::zeros({1, 1, 28, 28}));  // completes the deferred shapes
  std::vector<std::pair<std::string, std::vector<NDArray>>> grads;
  *floats = 0;
  for (const auto& [name, p] : net.collect_params()) {
    if (p.grad_req() == GradReq::kNull) continue;
    grads.emplace_back(name, p.list_grad());
    for (NDArray& g : grads.back().second) g.assign(1.0);
    *floats += p.data(kCpu0).size();
  }
  auto kv = kv::KVStore::create(type);
  for (auto& [name, g] : grads) kv->init(name, g[0]);
  auto run = [&] {
    engine::wait_all();
    auto start = Clock::now();
    int priority = 0;
    for (auto& [name, g] : grads) kv->pushpull(name, g, g, priority++);
    engine::wait_all();
    return seconds_since(start);
  };
  run();  // warm-up: staging buffers in the pools, homes of the keys
  return best_of(options.repeat, run) * 1e3;
}

// Trainer's choice, measured: after the gradient sum, (a) every device
// updates its own copy (pushpull into every gradient, one SGD kernel per
// copy: what Trainer does), or (b) the key's home device updates once and
// the new weights are broadcast to the other copies. ResNet-18 on cpu(0) and
// cpu(1), one intra-op thread each; milliseconds, best of `repeat`.
std::pair<double, double> update_strategies_ms(const Options& options) {
  CpuThreadsGuard guard({kCpu0, kCpu1}, 1);
  auto net = models::resnet18(10);
  net.initialize(init::Xavier(), {kCpu0, kCpu1});
  net(nd::zeros({1, 1, 28, 28}));
  struct Item {
    std::string name;
    std::vector<NDArray> weights, grads;
  };
  std::vector<Item> items;
  for (const auto& [name, p] : net.collect_params()) {
    if (p.grad_req() == GradReq::kNull) continue;
    items.push_back({name, p.list_data(), p.list_grad()});
    for (NDArray& g : items.back().grads) g.assign(1e-3);
  }
  optim::SGD sgd({.lr = 0.01, .momentum = 0.9});
  auto every = kv::KVStore::create("device");
  auto once = kv::KVStore::create("device");
  for (auto& it : items) {
    every->init(it.name, it.grads[0]);
    once->init(it.name, it.grads[0]);
  }
  auto time_it = [&](auto&& body) {
    auto run = [&] {
      engine::wait_all();
      auto start = Clock::now();
      sgd.begin_step();
      body();
      engine::wait_all();
      return seconds_since(start);
    };
    run();
    return best_of(options.repeat, run) * 1e3;
  };
  double every_ms = time_it([&] {
    int k = 0;
    for (auto& it : items) {
      every->pushpull(it.name, it.grads, it.grads, k);
      for (size_t d = 0; d < it.weights.size(); ++d)
        sgd.update(k * 2 + static_cast<int>(d), it.weights[d], it.grads[d], 1.0);
      ++k;
    }
  });
  double once_ms = time_it([&] {
    int k = 0;
    for (auto& it : items) {
      once->push(it.name, it.grads, k);
      size_t h = once->home(it.name) == it.weights[0].device() ? 0 : 1;
      once->pull(it.name, {it.grads[h]}, k);
      sgd.update(1000 + k, it.weights[h], it.grads[h], 1.0);
      for (size_t d = 0; d < it.weights.size(); ++d) {  // the new weights, straight to the other copies
        if (d != h) it.weights[h].copy_to(it.weights[d], k, "kv_copy");
      }
      ++k;
    }
  });
  return {every_ms, once_ms};
}

// One memcpy of `bytes` between two buffers (the ceiling for moving data).
double memcpy_seconds(const Options& options, size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  std::memcpy(b.data(), a.data(), bytes);  // warm-up: pages touched
  return best_of(options.repeat, [&] {
    auto start = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    double s = seconds_since(start);
    if (b[bytes / 2] != 1) s = 1e9;  // keeps the copy alive
    return s;
  });
}

std::vector<Figure> bench_allreduce(const Options& options) {
  int64_t floats = 0;
  double device_ms = allreduce_ms(options, "device", &floats);
  double local_ms = allreduce_ms(options, "local", &floats);
  double bytes = static_cast<double>(floats) * 4;
  double memcpy_gbps = bytes / memcpy_seconds(options, static_cast<size_t>(bytes)) / 1e9;
  // Algorithm bandwidth (NCCL's algbw): the gradient bytes over the time.
  double algbw = bytes / (device_ms / 1e3) / 1e9;
  return {{"allreduce_resnet18_floats_m", static_cast<double>(floats) / 1e6, "M"},
          {"allreduce_resnet18_grads_ms", device_ms, "ms"},
          {"allreduce_resnet18_grads_local_ms", local_ms, "ms"},
          {"allreduce_resnet18_algbw_gbps", algbw, "GB/s"},
          {"memcpy_gbps", memcpy_gbps, "GB/s"},
          {"allreduce_resnet18_vs_memcpy", algbw / memcpy_gbps, "x"}};
}

// Training images/s of `model` (zoo LeNet or ResNet-18, hybridized) with
// global batch `batch` over `devices`, one intra-op thread per device;
// synthetic data already on cpu(0) (the data loader is not measured). Best
// of `repeat` runs of `steps` steps after `warmup` steps.
struct DpRun {
  std::string model = "lenet";
  int64_t batch = 256;
  int warmup = 3;
  int steps = 10;
};

//
// Under mpirun (`group.size` > 1) each process trains on its share of the
// global batch (split as `kiln train` splits it) and the Trainer sums the
// gradients over the processes (dist_sync); the figure is then the whole
// job's images/s as this process sees it.
double images_per_s(const Options& options, const DpRun& run, const std::vector<Device>& devices,
                    kv::ProcessGroup group = {}) {
  CpuThreadsGuard guard({kCpu0, kCpu1}, 1);
  nd::random::seed(0);
  auto net = run.model == "resnet18" ? models::resnet18(10) : models::lenet();
  net.initialize(init::Xavier(), devices);
  net.hybridize();
  Trainer trainer(net.collect_params(), optim::SGD({.lr = 0.05}));
  loss::SoftmaxCrossEntropy loss_fn;
  NDArray X = nd::random::normal({run.batch, 1, 28, 28});
  std::vector<float> labels(static_cast<size_t>(run.batch));
  for (int64_t i = 0; i < run.batch; ++i) labels[static_cast<size_t>(i)] = static_cast<float>(i % 10);
  NDArray y = nd::array(labels);
  if (group.size > 1) {  // this process's rows of the global batch
    std::vector<int64_t> sizes = split_sizes(run.batch, group.size);
    int64_t begin = 0;
    for (int r = 0; r < group.rank; ++r) begin += sizes[static_cast<size_t>(r)];
    int64_t end = begin + sizes[static_cast<size_t>(group.rank)];
    X = nd::slice_axis(X, 0, begin, end);
    y = nd::slice_axis(y, 0, begin, end);
  }
  auto step = [&] {
    auto [xs, ys] = split_batch(X, y, devices);
    std::vector<NDArray> losses;
    {
      autograd::Record record;
      for (size_t i = 0; i < xs.size(); ++i) losses.push_back(loss_fn(net(xs[i]), ys[i]));
    }
    autograd::backward(losses);
    trainer.step(run.batch);
  };
  for (int i = 0; i < run.warmup; ++i) step();  // shapes, traces, pools
  double s = best_of(options.repeat, [&] {
    engine::wait_all();
    auto start = Clock::now();
    for (int i = 0; i < run.steps; ++i) step();
    engine::wait_all();
    return seconds_since(start);
  });
  return static_cast<double>(run.batch * run.steps) / s;
}

// Gradient aggregation hidden behind computation, read from a profiler
// trace of training steps: the aggregation ops (the KVStore's "kv_sum" and
// "kv_copy") are intersected with the union of the compute ops' intervals
// (every other op but the optimizer's updates and the Trainer's
// "trainer_copy" of new weights). Two ops of one lane never run at once, so
// what intersects runs on another lane. 1: every aggregation op ran while
// some backward op was running elsewhere; 0: aggregation waited for the
// whole backward.
struct OverlapFigures {
  double fraction = 0;
  double aggregation_ms = 0;  // summed durations of the aggregation ops, per step
};

bool is_aggregation(const profiler::Event& e) { return e.name == "kv_sum" || e.name == "kv_copy"; }

bool is_update(const profiler::Event& e) {
  return e.name == "trainer_copy" || e.name.ends_with("_update");  // sgd_update, sgd_mom_update, adam_update, ...
}

OverlapFigures aggregation_overlap(const std::vector<profiler::Event>& events, int steps) {
  std::vector<std::pair<int64_t, int64_t>> compute;
  for (const auto& e : events)
    if (!is_aggregation(e) && !is_update(e)) compute.emplace_back(e.start_ns, e.end_ns);
  std::sort(compute.begin(), compute.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& c : compute) {
    if (!merged.empty() && c.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, c.second);
    } else {
      merged.push_back(c);
    }
  }
  int64_t total = 0, hidden = 0;
  for (const auto& e : events) {
    if (!is_aggregation(e)) continue;
    total += e.end_ns - e.start_ns;
    for (const auto& [a, b] : merged) hidden += std::max<int64_t>(0, std::min(e.end_ns, b) - std::max(e.start_ns, a));
  }
  return {total > 0 ? static_cast<double>(hidden) / static_cast<double>(total) : 0.0,
          static_cast<double>(total) / 1e6 / steps};
}

// LeNet on [cpu(0), cpu(1)], global batch 256, one intra-op thread per
// device: a few profiled steps after warm-up.
OverlapFigures lenet_overlap(bool hybridize) {
  constexpr int64_t kBatch = 256;
  constexpr int kSteps = 3;
  const std::vector<Device> devices{kCpu0, kCpu1};
  CpuThreadsGuard guard({kCpu0, kCpu1}, 1);
  nd::random::seed(0);
  auto net = models::lenet();
  net.initialize(init::Xavier(), devices);
  if (hybridize) net.hybridize();
  Trainer trainer(net.collect_params(), optim::SGD({.lr = 0.05}));
  loss::SoftmaxCrossEntropy loss_fn;
  NDArray X = nd::random::normal({kBatch, 1, 28, 28});
  std::vector<float> labels(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) labels[static_cast<size_t>(i)] = static_cast<float>(i % 10);
  NDArray y = nd::array(labels);
  auto step = [&] {
    auto [xs, ys] = split_batch(X, y, devices);
    std::vector<NDArray> losses;
    {
      autograd::Record record;
      for (size_t i = 0; i < xs.size(); ++i) losses.push_back(loss_fn(net(xs[i]), ys[i]));
    }
    autograd::backward(losses);
    trainer.step(kBatch);
    engine::wait_all();
  };
  for (int i = 0; i < 3; ++i) step();
  bool was_on = profiler::enabled();  // KILN_PROFILE: keep the user's trace
  size_t before = was_on ? profiler::events().size() : 0;
  if (!was_on) {
    profiler::clear();
    profiler::start();
  }
  for (int i = 0; i < kSteps; ++i) step();
  std::vector<profiler::Event> events = profiler::events();
  events.erase(events.begin(), events.begin() + static_cast<std::ptrdiff_t>(before));
  if (!was_on) profiler::stop();
  return aggregation_overlap(events, kSteps);
}

std::vector<Figure> bench_dp_overlap(const Options&) {
  OverlapFigures hybrid = lenet_overlap(true);
  OverlapFigures eager = lenet_overlap(false);
  return {{"dp2_lenet_overlap_fraction", hybrid.fraction, "x"},
          {"dp2_lenet_aggregation_ms", hybrid.aggregation_ms, "ms"},
          {"dp2_lenet_imperative_overlap_fraction", eager.fraction, "x"},
          {"dp2_lenet_imperative_aggregation_ms", eager.aggregation_ms, "ms"}};
}

std::vector<Figure> bench_dp_lenet(const Options& options) {
  double one = images_per_s(options, {}, {kCpu0});
  double two = images_per_s(options, {}, {kCpu0, kCpu1});
  return {{"dp1_lenet_images_per_s", one, "img/s"},
          {"dp2_lenet_images_per_s", two, "img/s"},
          {"dp2_speedup_lenet", two / one, "x"}};
}

// ResNet-18 is about 50 img/s on one core: one warm-up and three timed steps
// (two gave ratios that moved by ±0.1 between runs), a single run (--repeat
// does not apply), so each side takes a few seconds.
// Two settings:
// - the same global batch (64) on one device and split over two: the speedup
//   of the same training (dp2_speedup_resnet18);
// - the chapter's (12.6: batch 256 on one GPU, 512 on two): the same batch
//   per device (64), so two devices train on twice the global batch
//   (dp2_speedup_resnet18_same_per_device).
std::vector<Figure> bench_dp_resnet18(const Options&) {
  DpRun run{.model = "resnet18", .batch = 64, .warmup = 1, .steps = 3};
  DpRun doubled = run;
  doubled.batch = 2 * run.batch;
  Options once{.repeat = 1};
  double one = images_per_s(once, run, {kCpu0});
  double two = images_per_s(once, run, {kCpu0, kCpu1});
  double two_doubled = images_per_s(once, doubled, {kCpu0, kCpu1});
  return {{"dp1_resnet18_images_per_s", one, "img/s"},
          {"dp2_resnet18_images_per_s", two, "img/s"},
          {"dp2_speedup_resnet18", two / one, "x"},
          {"dp2_resnet18_same_per_device_images_per_s", two_doubled, "img/s"},
          {"dp2_speedup_resnet18_same_per_device", two_doubled / one, "x"}};
}

// ---- mpi2_speedup_resnet18: processes instead of devices.
//
// The benchmark starts this same program under `mpirun -np 1` and
// `mpirun -np 2` (one core per process: OpenMPI binds each rank to a core
// for so few ranks, and each process computes on cpu(0) with one intra-op
// thread), each running the worker below; rank 0 writes its images/s to the
// file KILN_BENCH_MPI_OUT names. The global batch (64, as dp_resnet18) is
// the same for both, so the ratio is the speedup of the same training; a
// third job runs two processes on twice the batch (64 per process, the
// chapter's setting, as dp2_speedup_resnet18_same_per_device). The worker
// reads the global batch from KILN_BENCH_MPI_BATCH.
constexpr const char* kMpiWorkerEnv = "KILN_BENCH_MPI_OUT";
constexpr const char* kMpiBatchEnv = "KILN_BENCH_MPI_BATCH";
const DpRun kMpiRun{.model = "resnet18", .batch = 64, .warmup = 1, .steps = 3};

double run_mpi_worker_job(int processes, int64_t batch) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) throw NotSupported("mpi2_speedup_resnet18: no mpirun on PATH");
  std::string out = fmt::format("/tmp/kiln_bench_mpi_{}_{}.txt", static_cast<long>(::getpid()), processes);
  std::remove(out.c_str());
  // --allow-run-as-root: CI and these machines run as root.
  std::string cmd = fmt::format(
      "{}=\"{}\" {}={} mpirun --allow-run-as-root -np {} -x {} -x {} /proc/{}/exe bench mpi_resnet18_worker > /dev/null",
      kMpiWorkerEnv, out, kMpiBatchEnv, batch, processes, kMpiWorkerEnv, kMpiBatchEnv, static_cast<long>(::getpid()));
  int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  double ips = 0;
  if (rc != 0 || !(in >> ips) || ips <= 0) {
    throw Error(fmt::format("mpi2_speedup_resnet18: `{}` failed (exit status {}, no figure in {})", cmd, rc, out));
  }
  std::remove(out.c_str());
  return ips;
}

std::vector<Figure> bench_mpi_resnet18(const Options&) {
  double one = run_mpi_worker_job(1, kMpiRun.batch);
  double two = run_mpi_worker_job(2, kMpiRun.batch);
  double two_doubled = run_mpi_worker_job(2, 2 * kMpiRun.batch);
  return {{"mpi1_resnet18_images_per_s", one, "img/s"},
          {"mpi2_resnet18_images_per_s", two, "img/s"},
          {"mpi2_speedup_resnet18", two / one, "x"},
          {"mpi2_resnet18_same_per_process_images_per_s", two_doubled, "img/s"},
          {"mpi2_speedup_resnet18_same_per_process", two_doubled / one, "x"}};
}

// One process's part of the job above (selected only by name: it is run by
// bench_mpi_resnet18 under mpirun).
std::vector<Figure> bench_mpi_resnet18_worker(const Options&) {
  const char* out = std::getenv(kMpiWorkerEnv);
  KILN_CHECK(out != nullptr, ValueError, "mpi_resnet18_worker is run by `kiln bench dp_mpi_resnet18` (it needs {})",
             kMpiWorkerEnv);
  kv::ProcessGroup group = kv::launched_process_group();
  DpRun run = kMpiRun;
  if (const char* b = std::getenv(kMpiBatchEnv)) run.batch = std::max<int64_t>(1, std::atoll(b));
  double ips = images_per_s({.repeat = 1}, run, {kCpu0}, group);
  if (group.rank == 0) {
    std::ofstream(out) << ips << "\n";
  }
  return {{"mpi_worker_images_per_s", ips, "img/s"}};
}

std::vector<Figure> bench_update_strategies(const Options& options) {
  auto [every, once] = update_strategies_ms(options);
  return {{"dp_update_every_copy_ms", every, "ms"}, {"dp_update_once_broadcast_ms", once, "ms"}};
}

}  // namespace

void register_dp_benchmarks() {
  add({"dp_update", {"dp_update_every_copy_ms", "dp_update_once_broadcast_ms"}, &bench_update_strategies});
  add({"allreduce",
       {"allreduce_resnet18_floats_m", "allreduce_resnet18_grads_ms", "allreduce_resnet18_grads_local_ms",
        "allreduce_resnet18_algbw_gbps", "memcpy_gbps", "allreduce_resnet18_vs_memcpy"},
       &bench_allreduce});
  add({"dp_lenet", {"dp1_lenet_images_per_s", "dp2_lenet_images_per_s", "dp2_speedup_lenet"}, &bench_dp_lenet});
  add({"dp_resnet18",
       {"dp1_resnet18_images_per_s", "dp2_resnet18_images_per_s", "dp2_speedup_resnet18",
        "dp2_resnet18_same_per_device_images_per_s", "dp2_speedup_resnet18_same_per_device"},
       &bench_dp_resnet18});
  add({"dp_mpi_resnet18",
       {"mpi1_resnet18_images_per_s", "mpi2_resnet18_images_per_s", "mpi2_speedup_resnet18",
        "mpi2_resnet18_same_per_process_images_per_s", "mpi2_speedup_resnet18_same_per_process"},
       &bench_mpi_resnet18});
  add({"mpi_resnet18_worker", {"mpi_worker_images_per_s"}, &bench_mpi_resnet18_worker, /*internal=*/true});
  add({"dp_overlap",
       {"dp2_lenet_overlap_fraction", "dp2_lenet_aggregation_ms", "dp2_lenet_imperative_overlap_fraction",
        "dp2_lenet_imperative_aggregation_ms"},
       &bench_dp_overlap});
}

}  // namespace kiln::bench
