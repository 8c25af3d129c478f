// d2l 12.6, "Concise Implementation for Multiple GPUs": the same training
// loop (models/train_job.cc, what `kiln train --devices cpu:0,cpu:1`
// runs) on one device and on [cpu(0), cpu(1)]: parameters initialized on
// every device, split_and_load of each batch, and the Trainer summing the
// gradients through a KVStore. The chapter trains ResNet-18, which takes
// minutes per epoch on two cores; LeNet on the first 4,096 images (--quick:
// 1,024) keeps the run under 30 s. Every device gets one intra-op thread, so
// a device stands for one core as a GPU in the chapter stands for one GPU
// (as `kiln bench dp_lenet` measures).
#include "bench/bench.h"
#include "models/examples/examples.h"
#include "models/train_job.h"
#include "runtime/engine.h"

namespace kiln::examples {

namespace {

models::EpochStats train_on(const std::vector<Device>& devices, const Options& options) {
  models::TrainConfig cfg{.model = "lenet",
                          .epochs = 2,
                          .batch_size = 256,
                          .lr = 0.2,
                          .devices = devices,
                          .train_limit = options.quick ? 1024 : 4096,
                          .test_limit = options.quick ? 512 : 2000};
  if (options.quick) cfg.epochs = 1;
  // The last epoch: the first also pays for one-time work (kernel setup, pools).
  return models::train(cfg).back();
}

}  // namespace

void run_dp_concise(const Options& options) {
  const Device cpu0 = options.devices.at(0), cpu1 = options.devices.at(1);
  bench::CpuThreadsGuard threads(options.devices, 1);
  models::EpochStats one = train_on({cpu0}, options);
  models::EpochStats two = train_on({cpu0, cpu1}, options);
  fmt::print(stderr, "# LeNet, batch 256, lr 0.2; test accuracy and training seconds of the last epoch\n");
  report("dp_concise_1dev_test_acc", one.test_acc, "x");
  report("dp_concise_1dev_train_s", one.seconds, "s");
  report("dp_concise_2dev_test_acc", two.test_acc, "x");
  report("dp_concise_2dev_train_s", two.seconds, "s");
  report("dp_concise_2dev_speedup", one.seconds / two.seconds, "x");
}

}  // namespace kiln::examples
