// Global-norm clipping: the function against the norm worked out in double,
// the non-finite check, and the Trainer option (the norm of the rescaled
// gradients, clipped before the optimizer reads them).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "frontend/kiln.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

TEST(ClipGlobalNorm, ScalesEveryArrayByOneFactorWhenAboveTheBound) {
  std::vector<NDArray> a{nd::array(std::vector<float>{3, 0}), nd::array(std::vector<double>{0, 4}, Shape{1, 2}),
                         nd::array(std::vector<float>{12})};
  double norm = clip_global_norm(a, 6.5);
  EXPECT_DOUBLE_EQ(norm, 13);  // sqrt(9 + 16 + 144)
  const double s = 6.5 / (13 + 1e-8);
  test::expect_close(a[0], nd::array(std::vector<double>{3 * s, 0}), 1e-7, "a0");
  test::expect_close(a[1], nd::array(std::vector<double>{0, 4 * s}, Shape{1, 2}), 1e-15, "a1");
  test::expect_close(a[2], nd::array(std::vector<double>{12 * s}), 1e-7, "a2");
  // Below the bound nothing changes.
  std::vector<float> before = a[0].to_vector<float>();
  EXPECT_NEAR(clip_global_norm(a, 100), 6.5, 1e-6);
  EXPECT_EQ(a[0].to_vector<float>(), before);
  EXPECT_DOUBLE_EQ(clip_global_norm(std::vector<NDArray>{}, 1), 0);
}

TEST(ClipGlobalNorm, NonFiniteNormIsAnErrorThatNamesTheArrayAndChangesNothing) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<NDArray> a{nd::array(std::vector<float>{30, 40}), nd::array(std::vector<float>{1, inf, 2})};
  std::string msg = test::error_of<ValueError>([&] { clip_global_norm(a, 1); });
  EXPECT_CONTAINS(msg, "array 1 (shape [3])");
  EXPECT_CONTAINS(msg, "inf");
  EXPECT_EQ(a[0].to_vector<float>(), (std::vector<float>{30, 40}));
  // Without the check Gluon's arithmetic goes through.
  EXPECT_TRUE(std::isinf(clip_global_norm(a, 1, /*check_isfinite=*/false)));
  EXPECT_CONTAINS(test::error_of<ValueError>([&] { clip_global_norm(a, 0); }), "max_norm must be > 0");
  EXPECT_CONTAINS(test::error_of<TypeError>([&] { clip_global_norm({nd::zeros({2}, {.dtype = DType::kInt32})}, 1); }),
                  "int32");
}

struct TwoLayers : nn::HybridBlock {
  nn::Dense a{3, "", true, true, 2}, b{1, "", true, true, 3};
  TwoLayers() {
    register_child("a", a);
    register_child("b", b);
  }
  NDArray forward(const NDArray& x) override { return b(a(x)); }
};

TEST(ClipGlobalNorm, TrainerClipsTheRescaledGradientsBeforeTheUpdate) {
  NDArray x = nd::array(std::vector<float>{1, -2, 0.5f, 3}, Shape{2, 2});
  auto run = [&](double max_norm, double& norm_seen) {
    TwoLayers net;
    nd::random::seed(5);
    net.initialize(init::Normal(1.0));
    Trainer trainer(net.collect_params(), optim::SGD({.lr = 1.0}));
    if (max_norm > 0) trainer.set_max_grad_norm(max_norm);
    std::vector<std::vector<float>> before, grads;
    for (auto& [name, p] : net.collect_params()) before.push_back(p.data().to_vector<float>());
    {
      autograd::Record r;
      autograd::backward({nd::sum(nd::square(net(x)))});
    }
    double sum_sq = 0;
    for (auto& [name, p] : net.collect_params()) {
      grads.push_back(p.grad().to_vector<float>());
      for (float g : grads.back()) sum_sq += (g / 2.0) * (g / 2.0);  // batch 2
    }
    norm_seen = std::sqrt(sum_sq);
    trainer.step(2);
    if (max_norm > 0)
      EXPECT_NEAR(trainer.last_grad_norm(), norm_seen, 1e-5 * norm_seen);
    else
      EXPECT_TRUE(std::isnan(trainer.last_grad_norm()));
    // SGD with lr 1: the step is the (clipped) rescaled gradient.
    const double scale = max_norm > 0 && norm_seen > max_norm ? max_norm / norm_seen : 1.0;
    size_t i = 0;
    for (auto& [name, p] : net.collect_params()) {
      auto after = p.data().to_vector<float>();
      for (size_t j = 0; j < after.size(); ++j)
        EXPECT_NEAR(before[i][j] - after[j], scale * grads[i][j] / 2, 1e-5) << name << " " << j;
      ++i;
    }
  };
  double norm = 0;
  run(0, norm);  // no clipping
  ASSERT_GT(norm, 0.5);
  double again = 0;
  run(norm / 4, again);  // clipped to a quarter
  EXPECT_DOUBLE_EQ(again, norm);
  run(norm * 2, again);  // bound not reached
}

// With the batch split over two CPU devices, the clipped update equals the
// one-device update: the norm is that of the summed gradient.
TEST(ClipGlobalNorm, TrainerClipsTheSummedGradientOfSeveralDevices) {
  NDArray x = nd::array(std::vector<float>{1, -2, 0.5f, 3, 2, 1, -1, 0.5f}, Shape{4, 2});
  auto run = [&](const std::vector<Device>& devices, double& norm) {
    nn::Dense d(1, "", true, true, 2);
    d.initialize(init::One(), devices);
    Trainer trainer(d.collect_params(), optim::SGD({.lr = 1.0}));
    trainer.set_max_grad_norm(0.5);
    std::vector<NDArray> xs = split_and_load(x, devices);
    {
      autograd::Record r;
      std::vector<NDArray> losses;
      for (const NDArray& xi : xs) losses.push_back(nd::sum(nd::square(d(xi))));
      autograd::backward(losses);
    }
    trainer.step(4);
    norm = trainer.last_grad_norm();
    return d.weight().data(devices.back()).to_vector<float>();
  };
  double one = 0, two = 0;
  auto w1 = run({Device::cpu(0)}, one);
  auto w2 = run({Device::cpu(0), Device::cpu(1)}, two);
  EXPECT_GT(one, 0.5);  // clipping happened
  EXPECT_NEAR(two, one, 1e-5 * one);
  ASSERT_EQ(w1.size(), w2.size());
  for (size_t i = 0; i < w1.size(); ++i) EXPECT_NEAR(w2[i], w1[i], 1e-5) << i;
}

TEST(ClipGlobalNorm, TrainerRefusesANonFiniteStepAndNamesTheParameter) {
  nn::Dense d(1, "", true, true, 2);
  d.initialize(init::One());
  Trainer trainer(d.collect_params(), optim::SGD({.lr = 1.0}));
  trainer.set_max_grad_norm(1);
  NDArray x = nd::array(std::vector<float>{1, std::numeric_limits<float>::quiet_NaN()}, Shape{1, 2});
  {
    autograd::Record r;
    autograd::backward({nd::sum(d(x))});
  }
  std::string msg = test::error_of<ValueError>([&] { trainer.step(1); });
  EXPECT_CONTAINS(msg, "weight");
  EXPECT_CONTAINS(msg, "nan");
  EXPECT_EQ(trainer.optimizer().num_update(), 0);
  EXPECT_EQ(d.weight().data().to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_THROW(trainer.set_max_grad_norm(-1), ValueError);
}

}  // namespace
}  // namespace kiln
