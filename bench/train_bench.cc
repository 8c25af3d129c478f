// Training and inference throughput of the zoo's LeNet and ResNet-18 (d2l's
// variant) on synthetic data of Fashion-MNIST's shape (batch 256, 1x28x28,
// labels 0..9), so no dataset is needed. bench/pytorch_compare.py measures
// the same models, batch and steps in PyTorch.
//
// A training step is what `kiln train` does per batch: forward under
// autograd::Record, softmax cross-entropy, backward, Trainer::step (SGD).
// Steps are timed from push to the last updated weight being ready, after
// warm-up steps (oneDNN plans, the storage pool).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "bench/bench.h"
#include "frontend/amp.h"
#include "frontend/autograd.h"
#include "frontend/cached_op.h"
#include "frontend/nd.h"
#include "frontend/train/loss.h"
#include "frontend/train/trainer.h"
#include "models/zoo.h"
#include "runtime/engine.h"
#include "runtime/storage.h"

namespace kiln::bench {

namespace {

constexpr int64_t kBatch = 256;
constexpr double kMiB = 1024.0 * 1024.0;

struct Synthetic {
  NDArray data, label;
};

Synthetic synthetic_batch() {
  std::vector<float> labels(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) labels[static_cast<size_t>(i)] = static_cast<float>(i % 10);
  Synthetic s{nd::random::uniform({kBatch, 1, 28, 28}), nd::array(labels)};
  s.data.wait_to_read();
  s.label.wait_to_read();
  return s;
}

// A model, its trainer and one synthetic batch.
struct Job {
  nn::HybridSequential net;
  Trainer trainer;
  Synthetic batch = synthetic_batch();
  loss::SoftmaxCrossEntropy loss_fn;

  // amp: mixed precision (frontend/amp.h): the hybridize option, and an
  // autocast scope around each imperative forward.
  std::optional<DType> amp;

  explicit Job(const std::string& model, bool hybridize = false, std::optional<DType> amp_dtype = std::nullopt)
      : net(init_net(model)), trainer(net.collect_params(), optim::SGD({.lr = 0.05})), amp(amp_dtype) {
    if (hybridize) net.hybridize({.amp = amp});
  }



  static nn::HybridSequential init_net(const std::string& model) {
    nd::random::seed(0);
    nn::HybridSequential net = models::make(model, 10);
    net.initialize(init::Xavier(), {Device::cpu(0)});
    return net;
  }

  // Pushes `steps` training steps and waits for the weights.
  double train_seconds(int steps) {
    engine::wait_all();
    auto start = Clock::now();
    for (int i = 0; i < steps; ++i) {
      NDArray l;
      {
        std::optional<amp::Autocast> scope;
        if (amp) scope.emplace(*amp);
        autograd::Record record;
        l = loss_fn(net(batch.data), batch.label);
      }
      autograd::backward({l});
      trainer.step(kBatch);
    }
    engine::wait_all();
    return seconds_since(start);
  }

  double infer_seconds(int steps) {
    autograd::PredictMode predict;
    std::optional<amp::Autocast> scope;
    if (amp) scope.emplace(*amp);
    engine::wait_all();
    auto start = Clock::now();
    for (int i = 0; i < steps; ++i) net(batch.data).wait_to_read();
    engine::wait_all();
    return seconds_since(start);
  }
};

// Starts a fresh peak-RSS measurement in this process: returns the CPU
// pool's cached blocks to the system (earlier benchmarks of the same process
// left them resident) and resets VmHWM to the current resident set (writing
// 5 to /proc/self/clear_refs, Linux 4.0+). Without it the figure of a
// benchmark that runs after others was their peak (3,511 MiB measured so,
// against 2,160 alone).
void reset_peak_rss() {
  storage::pool(Device::cpu(0)).release_cached();
  std::ofstream("/proc/self/clear_refs") << "5";
}

// Peak resident set of the process (VmHWM), MiB: what getrusage's ru_maxrss
// reports for the PyTorch side.
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

// LeNet: 3 warm-up steps, then the best of `repeat` runs of 10 steps.
std::vector<Figure> bench_train_lenet(const Options& options) {
  Job job("lenet");
  job.train_seconds(3);
  double s = best_of(options.repeat, [&] { return job.train_seconds(10); });
  return {{"train_lenet_ips", 10.0 * kBatch / s, "img/s"}};
}

// ResNet-18 steps take seconds: one warm-up step, then the best of `repeat`
// single steps; inference likewise. The peak RSS is read after training.
std::vector<Figure> bench_resnet18(const Options& options) {
  reset_peak_rss();
  Job job("resnet18");
  job.train_seconds(1);
  double train = best_of(options.repeat, [&] { return job.train_seconds(1); });
  double peak = peak_rss_mib();
  job.infer_seconds(1);
  double infer = best_of(options.repeat, [&] { return job.infer_seconds(1); });
  return {{"train_resnet18_ips", kBatch / train, "img/s"},
          {"train_resnet18_peak_mb", peak, "MiB"},
          {"infer_resnet18_ips", kBatch / infer, "img/s"}};
}

// Peak bytes in use in cpu(0)'s storage pool while `fn` runs, MiB: unlike
// VmHWM it can be measured for several runs in one process.
template <typename F>
double pool_peak_mib(F&& fn) {
  storage::Pool& pool = storage::pool(Device::cpu(0));
  engine::wait_all();
  pool.reset_peak();
  fn();
  engine::wait_all();
  return static_cast<double>(pool.stats().peak_in_use) / (1024.0 * 1024.0);
}

// The same LeNet figure, hybridized (compiled forward and backward).
std::vector<Figure> bench_train_lenet_hybridized(const Options& options) {
  Job job("lenet", true);
  job.train_seconds(3);
  double s = best_of(options.repeat, [&] { return job.train_seconds(10); });
  return {{"train_lenet_hybridized_ips", 10.0 * kBatch / s, "img/s"}};
}

// ResNet-18 imperative vs hybridized training in one process: the pool's
// peak during one training step of each (weights, gradients, activations,
// temporaries; the hybridized figure without the imperative model's idle
// arrays), then throughput from steps alternated between the two models
// (imperative, hybridized, imperative, ...: a change of machine load hits
// both alike), the best of `repeat` steps each. The per-round ratios go to
// stderr.
std::vector<Figure> bench_resnet18_hybridized(const Options& options) {
  double peaks[2], train[2];
  TrainProgram::Memory memory;
  storage::Pool& pool = storage::pool(Device::cpu(0));
  Job imperative("resnet18", false);
  imperative.train_seconds(1);
  peaks[0] = pool_peak_mib([&] { imperative.train_seconds(1); });
  engine::wait_all();
  const double idle = static_cast<double>(pool.stats().in_use) / kMiB;
  Job hybrid("resnet18", true);
  hybrid.train_seconds(1);
  peaks[1] = pool_peak_mib([&] { hybrid.train_seconds(1); }) - idle;
  const CachedOp* op = hybrid.net.cached_op();
  if (op != nullptr && op->train_memory()) memory = *op->train_memory();
  std::fprintf(stderr, "# resnet18 hybridized training step: %s\n# pool peak: imperative %.1f MiB, hybridized %.1f MiB\n",
               memory.to_string().c_str(), peaks[0], peaks[1]);
  train[0] = train[1] = 1e300;
  for (int r = 0; r < options.repeat; ++r) {
    double ti = imperative.train_seconds(1), th = hybrid.train_seconds(1);
    std::fprintf(stderr, "# round %d: imperative %.3f s, hybridized %.3f s, ratio %.3f\n", r, ti, th, ti / th);
    train[0] = std::min(train[0], ti);
    train[1] = std::min(train[1], th);
  }
  return {{"train_resnet18_hybridized_ips", kBatch / train[1], "img/s"},
          {"train_resnet18_hybridized_speedup", train[0] / train[1], "x"},
          {"train_resnet18_pool_peak_mb", peaks[0], "MiB"},
          {"train_resnet18_hybridized_peak_mb", peaks[1], "MiB"},
          {"train_resnet18_hybridized_peak_ratio", peaks[1] / peaks[0], "x"},
          {"train_resnet18_hybridized_saved_mb", static_cast<double>(memory.saved) / kMiB, "MiB"},
          {"train_resnet18_hybridized_arena_mb",
           static_cast<double>(std::max(memory.forward_arena, memory.backward_arena)) / kMiB, "MiB"}};
}

// ResNet-18 inference (predict mode) imperative vs hybridized in one
// process, each the best of `repeat` batches after a warm-up batch: a group of
// its own so that it runs without the training steps above.
std::vector<Figure> bench_infer_resnet18_hybridized(const Options& options) {
  double infer[2];
  for (int h = 0; h < 2; ++h) {
    Job job("resnet18", h == 1);
    job.infer_seconds(1);
    infer[h] = best_of(options.repeat, [&] { return job.infer_seconds(1); });
  }
  return {{"infer_resnet18_hybridized_ips", kBatch / infer[1], "img/s"},
          {"infer_resnet18_hybridized_speedup", infer[0] / infer[1], "x"}};
}

// Mixed precision (bfloat16 compute, float32 parameters), d2l's ResNet-18
// and LeNet as above: training imperative under autocast (PyTorch's
// autocast is eager too), inference hybridized with the amp option, and a
// 2048^3 product of bfloat16 matrices (float32 accumulation).
std::vector<Figure> bench_amp(const Options& options) {
  constexpr int64_t n = 2048;
  NDArray a = nd::random::normal({n, n}).astype(DType::kBfloat16);
  NDArray b = nd::random::normal({n, n}).astype(DType::kBfloat16);
  nd::dot(a, b).wait_to_read();
  double mm = best_of(options.repeat, [&] {
    engine::wait_all();
    auto start = Clock::now();
    nd::dot(a, b).wait_to_read();
    return seconds_since(start);
  });
  a = b = NDArray();
  double lenet;
  {
    Job job("lenet", false, DType::kBfloat16);
    job.train_seconds(3);
    lenet = best_of(options.repeat, [&] { return job.train_seconds(10) / 10; });
  }
  reset_peak_rss();
  double train, peak, infer;
  {
    Job job("resnet18", false, DType::kBfloat16);
    job.train_seconds(1);
    train = best_of(options.repeat, [&] { return job.train_seconds(1); });
    peak = peak_rss_mib();
  }
  {
    Job job("resnet18", true, DType::kBfloat16);
    job.infer_seconds(1);
    infer = best_of(options.repeat, [&] { return job.infer_seconds(1); });
  }
  return {{"matmul_2048_bf16_gflops", 2.0 * n * n * n / mm * 1e-9, "GFLOP/s"},
          {"train_lenet_bf16_ips", kBatch / lenet, "img/s"},
          {"train_resnet18_bf16_ips", kBatch / train, "img/s"},
          {"train_resnet18_bf16_peak_mb", peak, "MiB"},
          {"infer_resnet18_bf16_ips", kBatch / infer, "img/s"}};
}

}  // namespace

void register_train_benchmarks() {
  add({"amp",
       {"matmul_2048_bf16_gflops", "train_lenet_bf16_ips", "train_resnet18_bf16_ips", "train_resnet18_bf16_peak_mb",
        "infer_resnet18_bf16_ips"},
       &bench_amp});
  add({"train_lenet_hybridized", {"train_lenet_hybridized_ips"}, &bench_train_lenet_hybridized});
  add({"resnet18_hybridized",
       {"train_resnet18_hybridized_ips", "train_resnet18_hybridized_speedup", "train_resnet18_pool_peak_mb",
        "train_resnet18_hybridized_peak_mb", "train_resnet18_hybridized_peak_ratio", "train_resnet18_hybridized_saved_mb",
        "train_resnet18_hybridized_arena_mb"},
       &bench_resnet18_hybridized});
  add({"infer_resnet18_hybridized",
       {"infer_resnet18_hybridized_ips", "infer_resnet18_hybridized_speedup"},
       &bench_infer_resnet18_hybridized});
  add({"train_lenet", {"train_lenet_ips"}, &bench_train_lenet});
  add({"train_resnet18", {"train_resnet18_ips", "train_resnet18_peak_mb", "infer_resnet18_ips"}, &bench_resnet18});
}

}  // namespace kiln::bench
