// AdamW: the adamw_update op against MXNet's formula and optim::AdamW against
// PyTorch's algorithm, both written out here in double, over several steps
// with a changing learning rate, rescaling and clipping; its state through
// save and load, and through a Trainer.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "frontend/kiln.h"
#include "tests/test_util.h"

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

NDArray array(const std::vector<double>& v, DType t) {
  return nd::array(v, Shape{static_cast<int64_t>(v.size())}).astype(t);
}

void expect_close(const NDArray& got, const std::vector<double>& want, double tol, const std::string& what) {
  auto g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], want[i], tol * (1 + std::abs(want[i]))) << what << " " << i;
}

class AdamW : public ::testing::TestWithParam<DType> {
 protected:
  double tol() const { return GetParam() == DType::kFloat32 ? 3e-5 : 1e-12; }
  static constexpr size_t kN = 70001;  // odd, with a vector tail, above the parallel grain
};

TEST_P(AdamW, UpdateOpFollowsMxnetsFormula) {
  const double b1 = 0.8, b2 = 0.99, eps = 1e-6, wd = 0.05, rescale = 0.5, c = 0.3;
  auto w = random_vector(kN, -1, 1, 1);
  std::vector<double> mean(kN, 0.0), var(kN, 0.0);
  NDArray weight = array(w, GetParam()), m = array(mean, GetParam()), v = array(var, GetParam());
  for (int t = 1; t <= 4; ++t) {
    auto g = random_vector(kN, -1, 1, 10 + t);
    const double lr = 0.5 + 0.1 * t, eta = 0.01 / t;
    nd::adamw_update(weight, array(g, GetParam()), m, v,
                     {.lr = lr,
                      .eta = eta,
                      .beta1 = b1,
                      .beta2 = b2,
                      .epsilon = eps,
                      .wd = wd,
                      .rescale_grad = rescale,
                      .clip_gradient = c});
    for (size_t i = 0; i < kN; ++i) {
      double d = clip(rescale * g[i], c);
      mean[i] = b1 * mean[i] + (1 - b1) * d;
      var[i] = b2 * var[i] + (1 - b2) * d * d;
      w[i] -= eta * (lr * mean[i] / (std::sqrt(var[i]) + eps) + wd * w[i]);
    }
  }
  expect_close(weight, w, tol(), "weight");
  expect_close(m, mean, tol(), "mean");
  expect_close(v, var, tol(), "var");
}

// PyTorch's AdamW step, literally: decay first, then the bias-corrected step.
struct TorchAdamW {
  double b1, b2, eps, wd;
  bool correct_bias = true;
  std::vector<double> w, m, v;
  int t = 0;
  void step(const std::vector<double>& grad, double lr, double rescale, double c) {
    ++t;
    const double c1 = correct_bias ? 1 - std::pow(b1, t) : 1, c2 = correct_bias ? 1 - std::pow(b2, t) : 1;
    for (size_t i = 0; i < w.size(); ++i) {
      double g = clip(rescale * grad[i], c);
      w[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
    }
  }
};

TEST_P(AdamW, OptimizerIsPyTorchsAdamWUnderASchedule) {
  for (bool correct_bias : {true, false}) {
    SCOPED_TRACE(correct_bias);
    const size_t n = 5003;
    // eps large enough that where it enters (after the bias correction) matters.
    optim::AdamWOptions o{.lr = 0.01,
                          .beta1 = 0.9,
                          .beta2 = 0.95,
                          .epsilon = 1e-3,
                          .wd = 0.1,
                          .clip_gradient = 0.8,
                          .correct_bias = correct_bias};
    optim::AdamW opt(o);
    opt.set_schedule([](int64_t step) { return 0.01 * (1.0 + 0.5 * static_cast<double>(step)); });
    TorchAdamW ref{o.beta1,
                   o.beta2,
                   o.epsilon,
                   o.wd,
                   correct_bias,
                   random_vector(n, -1, 1, 2),
                   std::vector<double>(n, 0.0),
                   std::vector<double>(n, 0.0)};
    NDArray weight = array(ref.w, GetParam());
    for (int s = 1; s <= 6; ++s) {
      auto g = random_vector(n, -2, 2, 30 + s);
      opt.begin_step();
      double lr = opt.learning_rate();
      EXPECT_DOUBLE_EQ(lr, 0.01 * (1.0 + 0.5 * s));
      opt.update(0, weight, array(g, GetParam()), 0.5);
      ref.step(g, lr, 0.5, o.clip_gradient);
    }
    expect_close(weight, ref.w, tol(), "weight");
  }
}

TEST_P(AdamW, DecayIsDecoupledFromTheMoments) {
  // Zero gradients: the moments stay zero and the weight only decays, by (1 - lr * wd) per step.
  optim::AdamW opt({.lr = 0.1, .wd = 0.5});
  NDArray weight = array({1, -2, 4}, GetParam()), zero = array({0, 0, 0}, GetParam());
  for (int s = 0; s < 3; ++s) {
    opt.begin_step();
    opt.update(3, weight, zero, 1.0);
  }
  double f = std::pow(1 - 0.1 * 0.5, 3);
  expect_close(weight, {f, -2 * f, 4 * f}, tol(), "weight");
  NamedArrays st = opt.state_arrays();
  ASSERT_EQ(st.size(), 4u);  // name, count, m, v
  expect_close(st[2].second, {0, 0, 0}, 0, "m");
  expect_close(st[3].second, {0, 0, 0}, 0, "v");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AdamW, ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(AdamWState, SavedAndLoadedStateContinuesTheSameTrajectory) {
  auto path = (std::filesystem::temp_directory_path() / fmt::format("kiln_adamw_{}.params", ::getpid())).string();
  NDArray g = nd::array(std::vector<float>{0.5f, -1, 2});
  optim::AdamW a({.lr = 0.1, .wd = 0.01});
  NDArray wa = nd::array(std::vector<float>{1, 2, 3});
  for (int s = 0; s < 3; ++s) {
    a.begin_step();
    a.update(7, wa, g, 1.0);
  }
  a.save_states(path);
  optim::AdamW b({.lr = 0.1, .wd = 0.01});
  b.load_states(path);
  EXPECT_EQ(b.num_update(), 3);
  NDArray wb = wa.copy();
  for (int s = 0; s < 2; ++s) {
    a.begin_step();
    a.update(7, wa, g, 1.0);
    b.begin_step();
    b.update(7, wb, g, 1.0);
  }
  EXPECT_EQ(wa.to_vector<float>(), wb.to_vector<float>());  // same moments, same bias correction
  optim::Adam adam({.lr = 0.1});
  std::string msg = test::error_of<IOError>([&] { adam.load_states(path); });
  EXPECT_CONTAINS(msg, "adamw");
  std::filesystem::remove(path);
}

TEST(AdamWState, TrainerStepsWithAdamW) {
  nn::Dense d(2, "", true, true, 3);
  d.initialize(init::One());
  Trainer trainer(d.collect_params(), optim::AdamW({.lr = 0.1, .wd = 0}));
  NDArray x = nd::array(std::vector<float>{1, 2, 3}, Shape{1, 3});
  {
    autograd::Record r;
    autograd::backward({nd::sum(d(x))});
  }
  trainer.step(1);
  // The first bias-corrected step moves every weight with a positive gradient down by lr
  // (m_hat / sqrt(v_hat) = sign): weights from 1, biases from 0.
  for (float v : d.weight().data().to_vector<float>()) EXPECT_NEAR(v, 0.9f, 1e-5);
  for (float v : d.bias().data().to_vector<float>()) EXPECT_NEAR(v, -0.1f, 1e-5);
}

}  // namespace
}  // namespace kiln
