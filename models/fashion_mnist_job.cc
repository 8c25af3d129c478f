#include "models/fashion_mnist_job.h"

#include <chrono>
#include <fstream>

#include <nlohmann/json.hpp>

#include "frontend/autograd.h"
#include "frontend/data/dataloader.h"
#include "frontend/data/fashion_mnist.h"
#include "frontend/kvstore.h"
#include "frontend/nd.h"
#include "frontend/split.h"
#include "frontend/train/loss.h"
#include "frontend/train/trainer.h"
#include "models/zoo.h"

namespace kiln::models {

namespace {

init::Initializer make_initializer(const std::string& spec) {
  if (spec == "xavier") return init::Xavier();
  if (spec.rfind("normal:", 0) == 0) {
    double sigma = 0;
    try {
      sigma = std::stod(spec.substr(7));
    } catch (const std::exception&) {
      sigma = -1;
    }
    KILN_CHECK(sigma > 0, ValueError, "--init {}: expected normal:SIGMA with SIGMA > 0", spec);
    return init::Normal(sigma);
  }
  throw ValueError(fmt::format("--init {}: expected 'xavier' or 'normal:SIGMA'", spec));
}

}  // namespace
namespace {

using Clock = std::chrono::steady_clock;

// Number of correct predictions in a batch, as a scalar on the batch's device.
NDArray correct(const NDArray& logits, const NDArray& label) {
  return nd::sum(nd::argmax(logits, 1) == label);
}

double evaluate(nn::Block& net, data::DataLoader& loader) {
  autograd::PredictMode predict;
  NDArray total;
  int64_t n = 0;
  for (const data::Batch& b : loader) {
    NDArray c = correct(net(b.data), b.label);
    total = total.is_none() ? c : total + c;
    n += b.label.size();
  }
  return n == 0 ? 0.0 : total.item<double>() / static_cast<double>(n);
}

}  // namespace

std::vector<EpochStats> train_fashion_mnist(const TrainConfig& cfg,
                                            const std::function<void(const EpochStats&)>& on_epoch,
                                            const ProgressFn& progress) {
  KILN_CHECK(cfg.epochs >= 1, ValueError, "train: epochs must be >= 1, got {}", cfg.epochs);
  KILN_CHECK(!cfg.devices.empty(), ValueError, "train: no devices given");
  Device dev = cfg.devices[0];  // where batches are loaded and the model is evaluated
  const kv::ProcessGroup group = kv::launched_process_group();  // mpirun -np N: N > 1
  std::string dir = cfg.data_dir.empty() ? data::FashionMNIST::default_dir() : cfg.data_dir;
  auto train_set = data::FashionMNIST::train(dir);
  auto test_set = data::FashionMNIST::test(dir);
  if (cfg.train_limit > 0) train_set = train_set.subset(0, std::min(cfg.train_limit, train_set.size()));
  if (cfg.test_limit > 0) test_set = test_set.subset(0, std::min(cfg.test_limit, test_set.size()));

  nd::random::seed(cfg.seed);
  nn::HybridSequential net = make(cfg.model, data::FashionMNIST::kClasses);
  net.initialize(make_initializer(cfg.init), cfg.devices);
  KILN_CHECK(cfg.export_prefix.empty() || cfg.hybridize, ValueError,
             "--export needs --hybridize (export writes the traced graph)");
  if (cfg.hybridize) net.hybridize();
  Trainer trainer(net.collect_params(), optim::SGD({.lr = cfg.lr, .momentum = cfg.momentum, .wd = cfg.wd}));
  loss::SoftmaxCrossEntropy loss_fn;

  data::DataLoader train_loader(train_set, cfg.batch_size,
                                {.shuffle = true, .seed = cfg.seed, .prefetch = 2, .device = dev});
  data::DataLoader test_loader(test_set, cfg.batch_size, {.prefetch = 2, .device = dev});
  int64_t batches = (train_set.size() + cfg.batch_size - 1) / cfg.batch_size;

  std::ofstream log;
  if (!cfg.log_path.empty()) {
    log.open(cfg.log_path);
    KILN_CHECK(log.good(), IOError, "{}: cannot open the log file for writing", cfg.log_path);
  }

  std::vector<EpochStats> history;
  for (int epoch = 1; epoch <= cfg.epochs; ++epoch) {
    auto start = Clock::now();
    NDArray loss_sum, correct_sum;
    int64_t seen = 0, done = 0;
    for (const data::Batch& b : train_loader) {
      // Data parallel: under mpirun each process takes its share of the batch
      // (the loaders shuffle alike); then one shard per device (one device:
      // the batch itself). Gradients are summed over all shards of all
      // processes, so step rescales by the global batch size.
      NDArray X = b.data, y = b.label;
      if (group.size > 1) {
        std::vector<int64_t> sizes = split_sizes(y.size(), group.size);
        if (static_cast<int>(sizes.size()) < group.size) continue;  // fewer rows than processes: skipped
        int64_t begin = 0;
        for (int r = 0; r < group.rank; ++r) begin += sizes[static_cast<size_t>(r)];
        X = nd::slice_axis(X, 0, begin, begin + sizes[static_cast<size_t>(group.rank)]);
        y = nd::slice_axis(y, 0, begin, begin + sizes[static_cast<size_t>(group.rank)]);
      }
      auto [xs, ys] = split_batch(X, y, cfg.devices);
      std::vector<NDArray> ls(xs.size()), logits(xs.size());
      {
        autograd::Record record;
        for (size_t i = 0; i < xs.size(); ++i) {
          logits[i] = net(xs[i]);
          ls[i] = loss_fn(logits[i], ys[i]);
        }
      }
      autograd::backward(ls);
      trainer.step(b.label.size());  // rescaled by the global batch size
      // Running sums stay on the devices; nothing here waits for the engine.
      for (size_t i = 0; i < xs.size(); ++i) {
        auto to_dev = [dev](const NDArray& x) { return x.device() == dev ? x : x.copy_to(dev); };
        NDArray lsum = to_dev(nd::sum(ls[i].detach())), csum = to_dev(correct(logits[i].detach(), ys[i]));
        loss_sum = loss_sum.is_none() ? lsum : loss_sum + lsum;
        correct_sum = correct_sum.is_none() ? csum : correct_sum + csum;
      }
      seen += y.size();
      if (progress) progress(++done, batches);
    }
    EpochStats s;
    s.epoch = epoch;
    s.loss = loss_sum.item<double>() / static_cast<double>(seen);
    s.train_acc = correct_sum.item<double>() / static_cast<double>(seen);
    s.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    s.images_per_sec = static_cast<double>(seen) / s.seconds;
    s.test_acc = evaluate(net, test_loader);
    history.push_back(s);
    if (log.is_open()) {
      log << nlohmann::json{{"epoch", s.epoch},         {"loss", s.loss},       {"train_acc", s.train_acc},
                            {"test_acc", s.test_acc},   {"seconds", s.seconds}, {"images_per_sec", s.images_per_sec}}
                 .dump()
          << "\n"
          << std::flush;
    }
    if (on_epoch) on_epoch(s);
  }
  if (!cfg.save_prefix.empty()) net.save_parameters(cfg.save_prefix + ".params");
  if (!cfg.export_prefix.empty()) {
    net.export_model(cfg.export_prefix);
  }
  return history;
}

}  // namespace kiln::models
