// SyncBatchNorm and the SyncSum beneath it: forward, backward and running
// statistics over shards on cpu(0) and cpu(1) equal BatchNorm on the whole
// batch (unequal shards too), a data-parallel training step with the Trainer
// equals the one-device step, and the failure modes say what went wrong.
#include <gtest/gtest.h>

#include "tests/test_util.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/nd.h"
#include "frontend/nn/nn.h"
#include "frontend/split.h"
#include "frontend/sync_sum.h"
#include "frontend/train/loss.h"
#include "frontend/train/trainer.h"

namespace kiln {
namespace {

using test::error_of;

const Device kCpu0 = Device::cpu(0), kCpu1 = Device::cpu(1);

bool naive_engine() { return engine::get().kind() == engine::Kind::kNaive; }

#define SKIP_UNDER_NAIVE_ENGINE() \
  if (naive_engine()) GTEST_SKIP() << "a cross-device rendezvous needs the threaded engine"

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i]));
    if (err > worst) worst = err, at = i;
  }
  EXPECT_LT(worst, tol) << what << " element " << at << ": " << got[at] << " vs " << want[at];
}

std::vector<float> values(const NDArray& a) { return a.to_vector<float>(); }

std::vector<float> concat_values(const std::vector<NDArray>& parts) {
  std::vector<float> out;
  for (const NDArray& p : parts) {
    auto v = values(p);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Rows [begin, end) of x, copied to `device`.
NDArray rows(const NDArray& x, int64_t begin, int64_t end, Device device) {
  return nd::slice_axis(x, 0, begin, end).copy_to(device);
}

TEST(SyncSum, EachSlotGetsTheSumOfAll) {
  SKIP_UNDER_NAIVE_ENGINE();
  SyncSum sum(2, "test sum");
  auto a = sum(0, {nd::array(std::vector<float>{1, 2}, kCpu0), nd::array(std::vector<float>{10}, kCpu0)});
  auto b = sum(1, {nd::array(std::vector<float>{3, 4}, kCpu1), nd::array(std::vector<float>{20}, kCpu1)});
  EXPECT_EQ(values(a[0]), (std::vector<float>{4, 6}));
  EXPECT_EQ(values(b[0]), (std::vector<float>{4, 6}));
  EXPECT_EQ(values(a[1]), (std::vector<float>{30}));
  EXPECT_EQ(b[1].device(), kCpu1);
}

TEST(SyncSum, AMissingSlotTimesOutWithAClearError) {
  SKIP_UNDER_NAIVE_ENGINE();
  SyncSum sum(2, "lonely sum", 0.2);
  auto a = sum(0, {nd::ones({2}, {.device = kCpu0})});
  std::string msg = error_of<Error>([&] { a[0].wait_to_read(); });
  EXPECT_CONTAINS(msg, "lonely sum (forward)");
  EXPECT_CONTAINS(msg, "1 of 2 arrived (cpu(0))");
  EXPECT_THROW(engine::get().wait_all(), Error);  // reports the error once more, and clears it
}

// One BatchNorm step on the whole batch, and the same through SyncBatchNorm
// on rows [0, split) on cpu(0) and [split, N) on cpu(1), for `steps` steps.
struct Compared {
  std::vector<float> y, dx, dgamma, dbeta, running_mean, running_var, predict;
  std::map<int, std::vector<float>> sync_running_mean, sync_running_var;  // by cpu id
};

Compared run_batch_norm(const std::vector<NDArray>& xs, const std::vector<NDArray>& ws, const NDArray& gamma,
                        const NDArray& beta, const NDArray& probe) {
  nn::BatchNorm bn(1, 0.9, 1e-5, true, true, false, /*in_channels=*/3);
  bn.initialize();
  bn.gamma().set_data(gamma);
  bn.beta().set_data(beta);
  Compared c;
  for (size_t s = 0; s < xs.size(); ++s) {
    NDArray x = xs[s].copy();
    x.attach_grad();
    NDArray y, head;
    {
      autograd::Record record;
      y = bn(x);
      head = nd::sum(y * ws[s]);
    }
    autograd::backward({head});
    c.y = values(y);
    c.dx = values(x.grad());
  }
  c.dgamma = values(bn.gamma().grad());
  c.dbeta = values(bn.beta().grad());
  c.running_mean = values(bn.running_mean().data());
  c.running_var = values(bn.running_var().data());
  c.predict = values(bn(probe));
  return c;
}

Compared run_sync_batch_norm(const std::vector<NDArray>& xs, const std::vector<NDArray>& ws, const NDArray& gamma,
                             const NDArray& beta, const NDArray& probe, int64_t split) {
  nn::SyncBatchNorm bn(2, 0.9, 1e-5, true, true, false, /*in_channels=*/3);
  bn.initialize(init::Zero(), {kCpu0, kCpu1});
  bn.gamma().set_data(gamma);
  bn.beta().set_data(beta);
  Compared c;
  for (size_t s = 0; s < xs.size(); ++s) {
    int64_t n = xs[s].shape()[0];
    std::vector<NDArray> x{rows(xs[s], 0, split, kCpu0), rows(xs[s], split, n, kCpu1)};
    std::vector<NDArray> w{rows(ws[s], 0, split, kCpu0), rows(ws[s], split, n, kCpu1)};
    std::vector<NDArray> y, heads;
    for (NDArray& a : x) a.attach_grad();
    {
      autograd::Record record;
      for (size_t k = 0; k < 2; ++k) {
        y.push_back(bn(x[k]));
        heads.push_back(nd::sum(y[k] * w[k]));
      }
    }
    autograd::backward(heads);
    c.y = concat_values(y);
    c.dx = concat_values({x[0].grad(), x[1].grad()});
  }
  auto sum_over_devices = [](const nn::Parameter& p) {
    return values(p.grad(kCpu0).copy_to(kCpu0) + p.grad(kCpu1).copy_to(kCpu0));
  };
  c.dgamma = sum_over_devices(bn.gamma());
  c.dbeta = sum_over_devices(bn.beta());
  for (Device d : {kCpu0, kCpu1}) {
    c.sync_running_mean[d.id] = values(bn.running_mean().data(d));
    c.sync_running_var[d.id] = values(bn.running_var().data(d));
  }
  c.predict = values(bn(probe.copy_to(kCpu1)));
  return c;
}

void expect_sync_matches(int64_t batch, int64_t split, int steps) {
  nd::random::seed(3);
  std::vector<NDArray> xs, ws;
  for (int s = 0; s < steps; ++s) {
    xs.push_back(nd::random::normal({batch, 3, 4, 5}, 1.0 + s, 2.0));
    ws.push_back(nd::random::normal({batch, 3, 4, 5}));  // uneven head gradients: dx is not ~0
  }
  NDArray gamma = nd::array(std::vector<float>{0.5f, 1.5f, -1.0f});
  NDArray beta = nd::array(std::vector<float>{0.1f, -0.2f, 0.3f});
  NDArray probe = nd::random::normal({2, 3, 4, 5});
  Compared want = run_batch_norm(xs, ws, gamma, beta, probe);
  Compared got = run_sync_batch_norm(xs, ws, gamma, beta, probe, split);
  expect_near_all(got.y, want.y, 1e-5, "y");
  expect_near_all(got.dx, want.dx, 1e-4, "dx");
  expect_near_all(got.dgamma, want.dgamma, 1e-4, "dgamma");
  expect_near_all(got.dbeta, want.dbeta, 1e-4, "dbeta");
  for (Device d : {kCpu0, kCpu1}) {
    expect_near_all(got.sync_running_mean[d.id], want.running_mean, 1e-5, "running_mean on " + d.to_string());
    expect_near_all(got.sync_running_var[d.id], want.running_var, 1e-5, "running_var on " + d.to_string());
  }
  expect_near_all(got.predict, want.predict, 1e-5, "predict mode");
}

TEST(SyncBatchNorm, UnequalShardsMatchBatchNormOnTheWholeBatch) {
  SKIP_UNDER_NAIVE_ENGINE();
  expect_sync_matches(8, 5, 1);
}

TEST(SyncBatchNorm, SeveralStepsKeepMatching) {
  SKIP_UNDER_NAIVE_ENGINE();
  expect_sync_matches(7, 4, 3);
}

// Shard 0's forward queues more than the 4 MiB back-pressure bound on cpu(0)
// behind its blocked SyncSum before shard 1 is issued: push must not hold the
// frontend there (runtime/engine.h, "Rendezvous"), or the step would only end
// at the timeout.
TEST(SyncBatchNorm, ShardsLargerThanTheBackPressureBoundDoNotWait) {
  SKIP_UNDER_NAIVE_ENGINE();
  nn::HybridSequential net;
  net.add(nn::Conv2D(8, 3), nn::SyncBatchNorm(2, 0.9, 1e-5, true, true, false, 0, /*timeout_s=*/20),
          nn::Activation("relu"), nn::Conv2D(8, 3), nn::Activation("relu"));
  net.initialize(init::Xavier(), {kCpu0, kCpu1});
  ASSERT_LE(engine::get().max_pending_bytes(), int64_t{8} << 20);
  auto xs = split_and_load(nd::random::normal({96, 3, 48, 48}), {kCpu0, kCpu1});
  std::vector<NDArray> heads;
  {
    autograd::Record record;
    for (const NDArray& x : xs) heads.push_back(nd::sum(net(x)));  // 48 x 8 x 46 x 46 floats: 3.2 MB per output
  }
  autograd::backward(heads);
  for (const auto& [name, p] : net.collect_params()) {
    if (p.grad_req() == GradReq::kNull) continue;
    for (const NDArray& g : p.list_grad()) g.wait_to_read();
  }
  engine::get().wait_all();
}

TEST(SyncBatchNorm, PrintsAsGluon) {
  nn::SyncBatchNorm bn(2, 0.9, 1e-5, true, true, false, 16);
  EXPECT_EQ(bn.to_string(),
            "SyncBatchNorm(num_devices=2, eps=1e-05, momentum=0.9, fix_gamma=False, use_global_stats=False, "
            "in_channels=16)");
  EXPECT_THROW(nn::SyncBatchNorm(0), ValueError);
}

TEST(SyncBatchNorm, HybridizedTrainingIsRejected) {
  SKIP_UNDER_NAIVE_ENGINE();
  nn::HybridSequential net;
  net.add(nn::Conv2D(4, 3), nn::SyncBatchNorm(2));
  net.initialize(init::Xavier(), {kCpu0, kCpu1});
  net.hybridize();
  NDArray x = nd::random::normal({2, 1, 6, 6});
  net(x);  // predict mode: BatchNorm with the running statistics, traced fine
  std::string msg = error_of<NotSupported>([&] {
    autograd::Record record;
    net(x);
  });
  EXPECT_CONTAINS(msg, "SyncBatchNorm");
  EXPECT_CONTAINS(msg, "hybridize");
}

TEST(SyncBatchNorm, TwoShardsOnOneDeviceInAStepAreRejected) {
  SKIP_UNDER_NAIVE_ENGINE();
  nn::SyncBatchNorm bn(2, 0.9, 1e-5, true, true, false, 0, /*timeout_s=*/0.2);
  bn.initialize(init::Zero(), {kCpu0, kCpu1});
  NDArray x = nd::random::normal({2, 3, 2, 2});
  NDArray y;
  {
    autograd::Record record;
    y = bn(x);
    EXPECT_CONTAINS(error_of<ValueError>([&] { bn(x); }), "already has a shard on cpu(0)");
  }
  // The step never completes: its one shard fails after the timeout.
  EXPECT_CONTAINS(error_of<Error>([&] { y.wait_to_read(); }), "1 of 2 arrived (cpu(0))");
  EXPECT_THROW(engine::get().wait_all(), Error);
}

// A small conv net with SyncBatchNorm trained data-parallel on two devices
// takes the same steps as with BatchNorm on one device.
enum class Norm { kBatchNormOneDevice, kBatchNormTwoDevices, kSyncTwoDevices };

std::map<std::string, std::vector<float>> train_small(Norm norm, int64_t batch, int steps) {
  const bool sync = norm == Norm::kSyncTwoDevices;
  std::vector<Device> devices =
      norm == Norm::kBatchNormOneDevice ? std::vector<Device>{kCpu0} : std::vector<Device>{kCpu0, kCpu1};
  auto make = [&] {
    nn::HybridSequential net;
    net.add(nn::Conv2D(4, 3));
    if (sync) {
      net.add(nn::SyncBatchNorm(2));
    } else {
      net.add(nn::BatchNorm());
    }
    net.add(nn::Activation("relu"), nn::Dense(3));
    return net;
  };
  nd::random::seed(21);
  auto init_net = make();
  init_net.initialize(init::Xavier());
  init_net(nd::zeros({1, 1, 6, 6}));
  auto net = make();
  net.initialize(init::Xavier(), devices);
  net(nd::zeros({1, 1, 6, 6}, {.device = devices[0]}));
  auto src = init_net.collect_params();
  for (auto [name, p] : net.collect_params()) p.set_data(src[name].data());

  Trainer trainer(net.collect_params(), optim::SGD({.lr = 0.1}));
  loss::SoftmaxCrossEntropy loss_fn;
  nd::random::seed(8);
  for (int s = 0; s < steps; ++s) {
    auto X = nd::random::normal({batch, 1, 6, 6});
    std::vector<float> labels;
    for (int64_t i = 0; i < batch; ++i) labels.push_back(static_cast<float>((i + s) % 3));
    auto [xs, ys] = split_batch(X, nd::array(labels), devices);
    std::vector<NDArray> losses;
    {
      autograd::Record record;
      for (size_t i = 0; i < xs.size(); ++i) losses.push_back(loss_fn(net(xs[i]), ys[i]));
    }
    autograd::backward(losses);
    trainer.step(batch);
  }
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, p] : net.collect_params())
    for (Device d : p.list_devices()) out[name + "@" + d.to_string()] = values(p.data(d));
  return out;
}

TEST(SyncBatchNorm, DataParallelTrainingMatchesOneDevice) {
  SKIP_UNDER_NAIVE_ENGINE();
  auto one = train_small(Norm::kBatchNormOneDevice, 7, 3);
  auto two = train_small(Norm::kSyncTwoDevices, 7, 3);
  for (const auto& [key, want] : one) {
    std::string name = key.substr(0, key.find('@'));
    for (Device d : {kCpu0, kCpu1}) {
      auto it = two.find(name + "@" + d.to_string());
      ASSERT_NE(it, two.end()) << name << " on " << d.to_string();
      expect_near_all(it->second, want, 1e-4, name + " on " + d.to_string());
    }
  }
}

// The comparison above can fail: plain BatchNorm (the default, as in MXNet)
// normalizes each shard with its own statistics.
TEST(SyncBatchNorm, PerDeviceBatchNormDiffersFromOneDevice) {
  auto one = train_small(Norm::kBatchNormOneDevice, 7, 3);
  auto two = train_small(Norm::kBatchNormTwoDevices, 7, 3);
  double worst = 0;
  for (const auto& [key, want] : one) {
    const auto& got = two.at(key.substr(0, key.find('@')) + "@cpu(1)");
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
  }
  EXPECT_GT(worst, 1e-3);
}

}  // namespace
}  // namespace kiln
