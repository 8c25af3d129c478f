// What a checkpoint costs: writing one of the zoo's LeNet and ResNet-18
// (parameters + SGD momentum, as `kiln train --momentum` saves them) with
// CheckpointDir::save (serialize, write, fsync, rename, directory fsync,
// manifest), the serialization alone (in memory: copies and crc32), and
// reading it back (read_checkpoint: crc32 and parsing). The
// write is what a training step pays every --checkpoint-every steps; it also
// waits for the step's queued work, which a figure here does not include.
// Files go to the system's temporary directory, so the disk is that one's.
#include <unistd.h>
#include <filesystem>

#include "bench/bench.h"
#include "frontend/autograd.h"
#include "frontend/data/dataloader.h"
#include "frontend/nd.h"
#include "frontend/train/checkpoint_dir.h"
#include "frontend/train/loss.h"
#include "frontend/train/train_state.h"
#include "frontend/train/trainer.h"
#include "models/zoo.h"
#include "runtime/engine.h"

namespace kiln::bench {

namespace {

std::vector<Figure> checkpoint_figures(const Options& o, const std::string& model) {
  nd::random::seed(0);
  nn::HybridSequential net = models::make(model, 10);
  net.initialize(init::Xavier());
  Trainer trainer(net.collect_params(), optim::SGD({.lr = 0.1, .momentum = 0.9}));
  {
    // One step, so that the momentum exists.
    NDArray x = nd::random::uniform({2, 1, 28, 28}), y = nd::array(std::vector<float>{1, 2}), l;
    {
      autograd::Record r;
      l = loss::SoftmaxCrossEntropy{}(net(x), y);
    }
    autograd::backward({l});
    trainer.step(2);
  }
  data::DataLoader loader(data::ArrayDataset(std::vector<float>(4), Shape{2}, {0, 1}), 1);
  train::Checkpoint c = train::capture_training(net.collect_params(), trainer, {.step = 1, .epoch = 1}, loader);
  engine::wait_all();
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln_bench_checkpoint_" + std::to_string(::getpid()));
  train::CheckpointDir ckpt(dir.string(), {.keep = 1});
  int64_t step = 0;
  std::string path;
  double save = best_of(o.repeat, [&] {
    auto t = Clock::now();
    path = ckpt.save(++step, c);
    return seconds_since(t);
  });
  double serialize = best_of(o.repeat, [&] {
    auto t = Clock::now();
    std::string bytes = train::serialize_checkpoint(c);
    return seconds_since(t);
  });
  double load = best_of(o.repeat, [&] {
    auto t = Clock::now();
    train::read_checkpoint(path);
    return seconds_since(t);
  });
  double mib = static_cast<double>(std::filesystem::file_size(path)) / (1024.0 * 1024.0);
  std::filesystem::remove_all(dir);
  return {{"checkpoint_" + model + "_mib", mib, "MiB"},
          {"checkpoint_save_" + model + "_ms", save * 1e3, "ms"},
          {"checkpoint_serialize_" + model + "_ms", serialize * 1e3, "ms"},
          {"checkpoint_load_" + model + "_ms", load * 1e3, "ms"}};
}

std::vector<Figure> bench_checkpoint(const Options& o) {
  std::vector<Figure> out = checkpoint_figures(o, "lenet");
  std::vector<Figure> r = checkpoint_figures(o, "resnet18");
  out.insert(out.end(), r.begin(), r.end());
  return out;
}

}  // namespace

void register_checkpoint_benchmarks() {
  add({"checkpoint",
       {"checkpoint_lenet_mib", "checkpoint_save_lenet_ms", "checkpoint_serialize_lenet_ms", "checkpoint_load_lenet_ms",
        "checkpoint_resnet18_mib", "checkpoint_save_resnet18_ms", "checkpoint_serialize_resnet18_ms",
        "checkpoint_load_resnet18_ms"},
       &bench_checkpoint});
}

}  // namespace kiln::bench
