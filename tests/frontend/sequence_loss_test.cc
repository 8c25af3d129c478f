// SequenceSoftmaxCrossEntropy: the mean over non-ignored positions against a
// float64 reference, its gradient against finite differences (first and
// second order), hybridized = imperative, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "frontend/kiln.h"
#include "tests/frontend/grad_check.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

constexpr int64_t kN = 2, kT = 3, kV = 5;

NDArray logits(DType t = DType::kFloat64) {
  return nd::array(test::uniform(kN * kT * kV, -3, 3, 1), Shape{kN, kT, kV}).astype(t);
}
// Two positions ignored (-100), one label of another dtype's worth.
NDArray labels() { return nd::array(std::vector<int32_t>{4, -100, 0, 2, 2, -100}, Shape{kN, kT}); }

double reference(const NDArray& x, const std::vector<int>& y, int64_t ignore) {
  auto v = x.to_vector<double>();
  double total = 0;
  int count = 0;
  for (int64_t r = 0; r < kN * kT; ++r) {
    if (y[static_cast<size_t>(r)] == ignore) continue;
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < kV; ++c) m = std::max(m, v[static_cast<size_t>(r * kV + c)]);
    for (int64_t c = 0; c < kV; ++c) s += std::exp(v[static_cast<size_t>(r * kV + c)] - m);
    total += m + std::log(s) - v[static_cast<size_t>(r * kV + y[static_cast<size_t>(r)])];
    ++count;
  }
  return count ? total / count : 0;
}

TEST(SequenceSoftmaxCrossEntropy, MeanOverThePositionsNotIgnored) {
  loss::SequenceSoftmaxCrossEntropy ce;
  NDArray l = ce(logits(), labels());
  EXPECT_EQ(l.shape(), Shape{});
  EXPECT_NEAR(l.item<double>(), reference(logits(), {4, -100, 0, 2, 2, -100}, -100), 1e-12);
  // Another ignore_index, float labels, float32 logits.
  loss::SequenceSoftmaxCrossEntropy ce0{.ignore_index = 2};
  NDArray yf = labels().astype(DType::kFloat32);
  EXPECT_CONTAINS(test::error_of<ValueError>([&] { ce0(logits(), yf).wait_to_read(); }), "-100");
  NDArray ok = nd::array(std::vector<float>{4, 1, 0, 2, 2, 3}, Shape{kN, kT});
  EXPECT_NEAR(ce0(logits(DType::kFloat32), ok).item<double>(), reference(logits(), {4, 1, 0, 2, 2, 3}, 2), 1e-5);
  // Every label ignored: 0, not NaN.
  NDArray none = nd::full({kN, kT}, -100.0);
  EXPECT_EQ(ce(logits(), none).item<double>(), 0);
}

TEST(SequenceSoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  loss::SequenceSoftmaxCrossEntropy ce;
  NDArray y = labels();
  testing::check_gradients([&](std::span<const NDArray> x) { return ce(x[0], y); }, {logits()});
  // Ignored positions get exactly zero gradient.
  NDArray x = logits();
  x.attach_grad();
  {
    autograd::Record r;
    autograd::backward({ce(x, y)});
  }
  auto g = x.grad().to_vector<double>();
  for (int64_t c = 0; c < kV; ++c) {
    EXPECT_EQ(g[static_cast<size_t>(1 * kV + c)], 0);
    EXPECT_EQ(g[static_cast<size_t>(5 * kV + c)], 0);
  }
}

TEST(SequenceSoftmaxCrossEntropy, SecondOrderMatchesDifferencesOfTheGradient) {
  // d/dx of sum(grad(x) * v): a Hessian-vector product, against central differences of the gradient.
  loss::SequenceSoftmaxCrossEntropy ce;
  NDArray y = labels();
  NDArray v = nd::array(test::uniform(kN * kT * kV, -1, 1, 7), Shape{kN, kT, kV}).astype(DType::kFloat64);
  auto grad_at = [&](const NDArray& x0) {
    NDArray x = x0.copy();
    x.attach_grad();
    {
      autograd::Record r;
      autograd::backward({ce(x, y)});
    }
    return x.grad().to_vector<double>();
  };
  NDArray x = logits();
  x.attach_grad();
  {
    autograd::Record r;
    std::vector<NDArray> heads{ce(x, y)}, vars{x};
    std::vector<NDArray> g = autograd::grad(heads, vars, {}, /*retain_graph=*/true, /*create_graph=*/true);
    autograd::backward({nd::sum(g[0] * v)});
  }
  auto got = x.grad().to_vector<double>();
  const double h = 1e-5;
  auto gp = grad_at(logits() + v * h), gm = grad_at(logits() - v * h);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], (gp[i] - gm[i]) / (2 * h), 1e-6) << i;
}

struct Scorer : nn::HybridBlock {
  nn::Dense proj{kV, "", true, false, 4};
  Scorer() { register_child("proj", proj); }
  NDArray forward(const NDArray& x) override { return proj(x); }
};

TEST(SequenceSoftmaxCrossEntropy, HybridizedModelGivesTheSameLossAndGradients) {
  Scorer net;
  nd::random::seed(2);
  net.initialize(init::Normal(1.0));
  NDArray x = nd::array(test::uniform(kN * kT * 4, -1, 1, 3), Shape{kN, kT, 4});
  loss::SequenceSoftmaxCrossEntropy ce;
  auto run = [&] {
    NDArray l;
    {
      autograd::Record r;
      l = ce(net(x), labels());
      autograd::backward({l});
    }
    return std::pair{l.item<double>(), net.proj.weight().grad().to_vector<float>()};
  };
  auto [l0, g0] = run();
  net.hybridize();
  auto [l1, g1] = run();
  EXPECT_NEAR(l1, l0, 1e-6);
  for (size_t i = 0; i < g0.size(); ++i) EXPECT_NEAR(g1[i], g0[i], 1e-5) << i;
}

TEST(SequenceSoftmaxCrossEntropy, MismatchedShapesNameBoth) {
  loss::SequenceSoftmaxCrossEntropy ce;
  std::string msg = test::error_of<ShapeError>([&] { ce(logits(), nd::zeros({kN, kT + 1})); });
  EXPECT_CONTAINS(msg, "label [2,4]");
  EXPECT_CONTAINS(msg, "pred [2,3,5]");
}

}  // namespace
}  // namespace kiln
