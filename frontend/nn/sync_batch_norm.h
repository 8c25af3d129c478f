// SyncBatchNorm: batch normalization whose training statistics are those of
// the whole batch spread over several devices (Gluon's
// gluon.contrib.nn.SyncBatchNorm(num_devices=...)).
//
//   net.add(nn::Conv2D(16, 3), nn::SyncBatchNorm(2), nn::Activation("relu"));
//   net.initialize(init::Xavier(), {Device::cpu(0), Device::cpu(1)});
//   auto xs = split_and_load(X, devices);              // e.g. 5 and 3 rows
//   { autograd::Record r; for (auto& x : xs) ls.push_back(loss(net(x), ...)); }
//   autograd::backward(ls);                            // dx, dgamma, dbeta as one BatchNorm on X
//
// Train mode (autograd::is_training(), not use_global_stats): the calls of one
// training step, one per device in the order the loop issues them, form a
// group of `num_devices`; calls 0..n-1 are step 0, n..2n-1 step 1, and so on.
// Each call computes its shard's per-channel sums, and a SyncSum
// (frontend/sync_sum.h) adds them over the group: first sum(x) and the
// element count (mean over the true global count, so unequal shards are
// exact), then sum((x - mean)^2) (the biased variance, two-pass as
// BatchNorm's kernel). out = gamma * (x - mean) / sqrt(var + eps) + beta is
// built from ordinary ops, so autograd differentiates it; the sums' backward
// is the cross-device sum of gradients, which makes dx use the global
// sum(dy) and sum(dy * xhat). dgamma and dbeta on each device are that
// shard's part; the Trainer's sum over devices gives the whole batch's.
// Every device's copy of running_mean/running_var is updated with the global
// statistics, so the copies stay identical. Predict mode (or
// use_global_stats) is BatchNorm with the running statistics.
//
// Why this design: Kiln's frontend issues shard 0's whole forward before
// shard 1's, so shard 0's normalization must wait for statistics that later
// calls produce. The SyncSum op blocks only its own device's engine worker
// (each cpu(i) has its own), and suspends back-pressure while pending, so the
// loop can go on issuing the other shards (runtime/engine.h, "Rendezvous").
//
// Devices: CPUs, CUDA GPUs or a mix. The sums go through host memory, except
// when every device of the step is a distinct GPU whose order is known (one
// device, or the previous step's devices in the same order) and NCCL can
// run: then one ncclAllReduce over the GPUs (SyncSum). With NCCL, a step
// whose devices come in another order than the previous step's is a
// DeviceError at the call.
//
// Errors: a second call on a device that already gave a shard in the current
// step (ValueError, at the call); a step whose other shards never come (the
// last batch split over fewer devices, a loop that reads a shard's output
// before issuing the next) fails after `timeout_s` with an error naming the
// layer, the step and the devices that arrived, when a result is read.
// NotSupported in train mode when traced (hybridize: the sum meets calls made
// outside the traced graph) and under KILN_ENGINE=naive. Channel axis 1,
// float32.
//
// Prints as Gluon: "SyncBatchNorm(num_devices=2, eps=1e-05, momentum=0.9,
// fix_gamma=False, use_global_stats=False, in_channels=16)".
#pragma once

#include <memory>

#include "frontend/nn/batch_norm.h"

namespace kiln {
class SyncSum;
}

namespace kiln::nn {

class SyncBatchNorm : public BatchNorm {
 public:
  // ValueError for num_devices < 1 or timeout_s <= 0, and as BatchNorm.
  explicit SyncBatchNorm(int num_devices, double momentum = 0.9, double epsilon = 1e-5, bool center = true,
                         bool scale = true, bool use_global_stats = false, int64_t in_channels = 0,
                         double timeout_s = 60);

  NDArray forward(const NDArray& x) override;
  std::string to_string() const override;

  int num_devices() const { return num_devices_; }

 private:
  // Per-step state, shared by copies of this handle (containers hold copies).
  struct Steps {
    int64_t calls = 0;  // train-mode calls so far
    std::shared_ptr<SyncSum> mean_sum, var_sum;  // of the current step
    std::vector<Device> devices;                 // devices of the current step's calls
    std::vector<Device> last_devices;            // of the last complete step, in call order
  };

  int num_devices_;
  double timeout_s_;
  std::shared_ptr<Steps> steps_ = std::make_shared<Steps>();
};

}  // namespace kiln::nn
