// Data-parallel training shared by the CPU and GPU suites: LeNet trained on
// a list of devices through the Trainer, and the comparison of every copy of
// every parameter with a one-device run (tests/frontend/data_parallel_test.cc,
// tests/cuda/cuda_data_parallel_test.cc, the MPI worker).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/nd.h"
#include "frontend/nn/nn.h"
#include "frontend/split.h"
#include "frontend/train/loss.h"
#include "frontend/train/trainer.h"
#include "models/zoo.h"

namespace kiln::test {

struct RunResult {
  std::map<std::string, std::vector<float>> params;  // from every device copy: name@device
};

// Trains LeNet for `steps` SGD steps on `devices` with global batch `batch`
// (the same data and the same initial values whatever the devices), and
// returns every copy of every parameter.
// With world > 1 (one process of several under mpirun), this process trains
// on its balanced share of each global batch.
inline RunResult train_lenet(const std::vector<Device>& devices, const std::string& kvstore, bool hybridize, int64_t batch,
                      int steps, int rank = 0, int world = 1) {
  // Initial values: drawn once on cpu(0), then copied, so they do not depend
  // on which device drew them.
  nd::random::seed(11);
  auto init_net = models::lenet();
  init_net.initialize(init::Xavier());
  init_net(nd::zeros({1, 1, 28, 28}));

  auto net = models::lenet();
  net.initialize(init::Xavier(), devices);
  net(nd::zeros({1, 1, 28, 28}, {.device = devices[0]}));  // completes the deferred shapes
  auto src = init_net.collect_params();
  for (auto [name, p] : net.collect_params()) p.set_data(src[name].data());
  if (hybridize) net.hybridize();

  Trainer trainer(net.collect_params(), optim::SGD({.lr = 0.1, .momentum = 0.9}), kvstore);
  loss::SoftmaxCrossEntropy loss_fn;
  nd::random::seed(5);
  for (int s = 0; s < steps; ++s) {
    auto X = nd::random::normal({batch, 1, 28, 28});
    std::vector<float> labels(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = static_cast<float>((i * 7 + s) % 10);
    auto y = nd::array(labels);
    if (world > 1) {
      std::vector<int64_t> sizes = split_sizes(batch, world);
      int64_t begin = 0;
      for (int r = 0; r < rank; ++r) begin += sizes[static_cast<size_t>(r)];
      int64_t end = begin + sizes[static_cast<size_t>(rank)];
      X = nd::slice_axis(X, 0, begin, end);
      y = nd::slice_axis(y, 0, begin, end);
    }
    auto [xs, ys] = split_batch(X, y, devices);
    std::vector<NDArray> losses;
    {
      autograd::Record record;
      for (size_t i = 0; i < xs.size(); ++i) losses.push_back(loss_fn(net(xs[i]), ys[i]));
    }
    autograd::backward(losses);
    trainer.step(batch);
  }
  RunResult r;
  for (const auto& [name, p] : net.collect_params()) {
    for (Device d : p.list_devices()) r.params[name + "@" + d.to_string()] = p.data(d).to_vector<float>();
  }
  return r;
}

inline void expect_same_params(const RunResult& one, const RunResult& many, const std::vector<Device>& devices,
                               double tolerance = 1e-5) {
  for (const auto& [key, want] : one.params) {
    std::string name = key.substr(0, key.find('@'));
    for (Device d : devices) {
      auto it = many.params.find(name + "@" + d.to_string());
      ASSERT_NE(it, many.params.end()) << name << " has no copy on " << d.to_string();
      const auto& got = it->second;
      ASSERT_EQ(got.size(), want.size());
      double worst = 0;
      size_t at = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        double err = std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i]));
        if (err > worst) worst = err, at = i;
      }
      EXPECT_LT(worst, tolerance) << name << " on " << d.to_string() << " element " << at << ": " << got[at] << " vs "
                             << want[at];
    }
  }
}

}  // namespace kiln::test
