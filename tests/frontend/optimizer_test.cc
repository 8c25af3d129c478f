// The fused optimizer updates against MXNet's formulas written out here (in
// double), over several steps with momentum, weight decay, clipping and
// rescaling, on cpu(0) and cpu(1).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "frontend/invoke.h"
#include "frontend/nd.h"

namespace kiln {
namespace {

std::vector<double> random_vector(size_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

double clip(double v, double c) { return c >= 0 ? std::max(-c, std::min(c, v)) : v; }

struct Hyper {
  double wd, rescale, clip;
};
// Large enough that some gradients are clipped, some weights decay noticeably.
const Hyper kHypers[] = {{0, 1, -1}, {0.01, 1, -1}, {0.1, 0.5, 0.3}, {0.001, 2, 1.5}};

class Optimizer : public ::testing::TestWithParam<std::tuple<int, DType>> {
 protected:
  Device dev() const { return Device::cpu(std::get<0>(GetParam())); }
  DType dtype() const { return std::get<1>(GetParam()); }
  double tol() const { return dtype() == DType::kFloat32 ? 2e-5 : 1e-12; }
  NDArray array(const std::vector<double>& v) {
    NDArray a = nd::array(v, Shape{static_cast<int64_t>(v.size())}, dev());
    return dtype() == DType::kFloat64 ? a : a.astype(dtype());
  }
  void expect_close(const NDArray& got, const std::vector<double>& want, const std::string& what) {
    auto g = got.to_vector<double>();
    ASSERT_EQ(g.size(), want.size());
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], want[i], tol() * (1 + std::abs(want[i]))) << what << " at " << i;
  }
  // An odd size with a vector tail, above the parallel grain so both threads run.
  static constexpr size_t kN = 70001;
};

TEST_P(Optimizer, SgdUpdate) {
  for (const Hyper& h : kHypers) {
    auto w = random_vector(kN, -1, 1, 1);
    NDArray weight = array(w);
    for (int step = 0; step < 4; ++step) {
      auto g = random_vector(kN, -1, 1, 10 + step);
      const double lr = 0.1 / (step + 1);
      nd::sgd_update(weight, array(g), {.lr = lr, .wd = h.wd, .rescale_grad = h.rescale, .clip_gradient = h.clip});
      for (size_t i = 0; i < kN; ++i) w[i] = (1 - lr * h.wd) * w[i] - lr * clip(h.rescale * g[i], h.clip);
    }
    expect_close(weight, w, fmt::format("wd={} rescale={} clip={}", h.wd, h.rescale, h.clip));
  }
}

TEST_P(Optimizer, SgdMomUpdate) {
  for (const Hyper& h : kHypers) {
    auto w = random_vector(kN, -1, 1, 2);
    std::vector<double> mom(kN, 0.0);
    NDArray weight = array(w), state = array(mom);
    for (int step = 0; step < 5; ++step) {
      auto g = random_vector(kN, -1, 1, 20 + step);
      const double lr = 0.05, momentum = 0.9;
      nd::sgd_mom_update(
          weight, array(g), state,
          {.lr = lr, .momentum = momentum, .wd = h.wd, .rescale_grad = h.rescale, .clip_gradient = h.clip});
      for (size_t i = 0; i < kN; ++i) {
        mom[i] = momentum * mom[i] - lr * h.wd * w[i] - lr * clip(h.rescale * g[i], h.clip);
        w[i] += mom[i];
      }
    }
    std::string what = fmt::format("wd={} rescale={} clip={}", h.wd, h.rescale, h.clip);
    expect_close(weight, w, "weight " + what);
    expect_close(state, mom, "mom " + what);
  }
}

TEST_P(Optimizer, NagMomUpdate) {
  for (const Hyper& h : kHypers) {
    auto w = random_vector(kN, -1, 1, 3);
    std::vector<double> mom(kN, 0.0);
    NDArray weight = array(w), state = array(mom);
    for (int step = 0; step < 5; ++step) {
      auto g = random_vector(kN, -1, 1, 30 + step);
      const double lr = 0.05, momentum = 0.8;
      nd::nag_mom_update(
          weight, array(g), state,
          {.lr = lr, .momentum = momentum, .wd = h.wd, .rescale_grad = h.rescale, .clip_gradient = h.clip});
      // MXNet 1.x: mom' = momentum*mom; w = w - mom' + (momentum+1) * (mom' - lr*d); mom = mom' - lr*d.
      for (size_t i = 0; i < kN; ++i) {
        double d = clip(h.rescale * g[i], h.clip) + h.wd * w[i];
        double m1 = momentum * mom[i];
        w[i] = w[i] - m1 + (momentum + 1) * (m1 - lr * d);
        mom[i] = m1 - lr * d;
      }
    }
    std::string what = fmt::format("wd={} rescale={} clip={}", h.wd, h.rescale, h.clip);
    expect_close(weight, w, "weight " + what);
    expect_close(state, mom, "mom " + what);
  }
}

TEST_P(Optimizer, AdamUpdateWithBiasCorrectionFoldedIntoLr) {
  for (const Hyper& h : kHypers) {
    auto w = random_vector(kN, -1, 1, 4);
    std::vector<double> mean(kN, 0.0), var(kN, 0.0);
    NDArray weight = array(w), m = array(mean), v = array(var);
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    for (int t = 1; t <= 5; ++t) {
      auto g = random_vector(kN, -1, 1, 40 + t);
      const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
      nd::adam_update(weight, array(g), m, v,
                      {.lr = lr_t, .wd = h.wd, .rescale_grad = h.rescale, .clip_gradient = h.clip});
      for (size_t i = 0; i < kN; ++i) {
        double d = clip(h.rescale * g[i] + h.wd * w[i], h.clip);
        mean[i] = b1 * mean[i] + (1 - b1) * d;
        var[i] = b2 * var[i] + (1 - b2) * d * d;
        w[i] -= lr_t * mean[i] / (std::sqrt(var[i]) + eps);
      }
    }
    std::string what = fmt::format("wd={} rescale={} clip={}", h.wd, h.rescale, h.clip);
    expect_close(weight, w, "weight " + what);
    expect_close(m, mean, "mean " + what);
    expect_close(v, var, "var " + what);
  }
}

TEST_P(Optimizer, UpdatesInPlaceAndKeepTheGradBuffer) {
  NDArray weight = array({1, 2, 3});
  weight.attach_grad();
  NDArray alias = weight;  // another handle on the same storage
  nd::sgd_update(weight, array({1, 1, 1}), {.lr = 0.5});
  expect_close(alias, {0.5, 1.5, 2.5}, "alias");
  EXPECT_FALSE(weight.grad().is_none());
  EXPECT_EQ(weight.grad().shape(), (Shape{3}));
}

TEST_P(Optimizer, MismatchedStateIsAnErrorAtTheCall) {
  NDArray weight = array({1, 2, 3});
  EXPECT_THROW(nd::sgd_update(weight, array({1, 2}), {.lr = 0.1}), ShapeError);
  EXPECT_THROW(nd::adam_update(weight, array({1, 2, 3}), array({0, 0, 0}), array({0, 0}), {.lr = 0.1}), ShapeError);
  EXPECT_THROW(nd::sgd_update(weight, nd::zeros({3}, {.dtype = DType::kInt32, .device = dev()}), {.lr = 0.1}),
               TypeError);
  EXPECT_EQ(weight.to_vector<double>(), (std::vector<double>{1, 2, 3}));
  EXPECT_FALSE(op_def(OpId::kAdamUpdate).differentiable);
  EXPECT_EQ(op_def(OpId::kAdamUpdate).mutate_inputs, (std::vector<int>{2, 3}));
}

TEST_P(Optimizer, AttributesRoundTripMxnetStrings) {
  const OpDef* d = find_op("adam_update");
  ASSERT_NE(d, nullptr);
  OpAttrs a = d->parse_attrs("adam_update", {{"lr", "0.01"}, {"beta1", "0.8"}, {"clip_gradient", "5"}});
  EXPECT_EQ(a.as<AdamAttrs>().beta1, 0.8);
  EXPECT_EQ(a.to_strings(), (AttrMap{{"lr", "0.01"}, {"beta1", "0.8"}, {"clip_gradient", "5"}}));
  EXPECT_THROW(d->parse_attrs("adam_update", {{"beta1", "0.8"}}), ValueError);  // lr is required
}

INSTANTIATE_TEST_SUITE_P(Devices, Optimizer,
                         ::testing::Combine(::testing::Values(0, 1),
                                            ::testing::Values(DType::kFloat32, DType::kFloat64)),
                         [](const auto& info) {
                           return fmt::format("cpu{}_{}", std::get<0>(info.param), std::get<1>(info.param));
                         });

}  // namespace
}  // namespace kiln
