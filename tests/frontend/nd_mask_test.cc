// causal_mask and masked_softmax: values against a float64 reference (causal
// and padding masks, a fully masked row), gradients against finite
// differences, hybridized = imperative, and a mask of the wrong shape.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "frontend/kiln.h"
#include "tests/frontend/grad_check.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

NDArray scores(Shape s, uint64_t seed) {
  return nd::array(test::uniform(s.size(), -3, 3, seed), s).astype(DType::kFloat64);
}

TEST(Masks, CausalMaskIsLowerTriangular) {
  NDArray m = nd::causal_mask(4);
  EXPECT_EQ(m.shape(), (Shape{4, 4}));
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(nd::causal_mask(0).shape(), (Shape{0, 0}));
  EXPECT_THROW(nd::causal_mask(-1), ValueError);
}

// softmax over the kept elements of each last-axis row of x [rows, n], 0 elsewhere.
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& keep, int64_t rows, int64_t n) {
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; ++j)
      if (keep[r * n + j] != 0) m = std::max(m, x[r * n + j]);
    for (int64_t j = 0; j < n; ++j)
      if (keep[r * n + j] != 0) s += std::exp(x[r * n + j] - m);
    for (int64_t j = 0; j < n; ++j)
      if (keep[r * n + j] != 0) y[r * n + j] = std::exp(x[r * n + j] - m) / s;
  }
  return y;
}

TEST(Masks, MaskedSoftmaxWithCausalAndPaddingMasks) {
  const int64_t n = 2, h = 3, t = 5;
  NDArray x = scores({n, h, t, t}, 1);
  // Causal, broadcast over batch and heads.
  NDArray y = nd::masked_softmax(x, nd::causal_mask(t));
  std::vector<double> keep;
  for (int64_t b = 0; b < n * h; ++b)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j) keep.push_back(j <= i ? 1 : 0);
  auto got = y.to_vector<double>(), want = reference(x.to_vector<double>(), keep, n * h * t, t);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-15) << i;
  // Padding per sample [N, 1, 1, T] (int32), the second sample keeping nothing.
  NDArray pad = nd::array(std::vector<int32_t>{1, 1, 1, 0, 0, 0, 0, 0, 0, 0}, Shape{n, 1, 1, t});
  std::vector<double> keep2;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t r = 0; r < h * t; ++r)
      for (int64_t j = 0; j < t; ++j) keep2.push_back(b == 0 && j < 3 ? 1 : 0);
  got = nd::masked_softmax(x, pad).to_vector<double>();
  want = reference(x.to_vector<double>(), keep2, n * h * t, t);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-15) << i;
  // float32 too.
  auto f = nd::masked_softmax(x.astype(DType::kFloat32), nd::causal_mask(t)).to_vector<double>();
  want = reference(x.to_vector<double>(), keep, n * h * t, t);
  for (size_t i = 0; i < f.size(); ++i) ASSERT_NEAR(f[i], want[i], 1e-6) << i;
}

TEST(Masks, MaskedSoftmaxGradientsMatchFiniteDifferences) {
  NDArray mask = nd::causal_mask(4, {.dtype = DType::kFloat64});
  testing::check_gradients([&](std::span<const NDArray> x) { return nd::masked_softmax(x[0], mask); },
                           {scores({2, 4, 4}, 2)});
  // Second order: a Hessian-vector product against differences of the gradient.
  NDArray v = scores({2, 4, 4}, 3), w = scores({2, 4, 4}, 4);
  auto grad_at = [&](const NDArray& x0) {
    NDArray x = x0.copy();
    x.attach_grad();
    {
      autograd::Record r;
      autograd::backward({nd::sum(nd::masked_softmax(x, mask) * w)});
    }
    return x.grad().to_vector<double>();
  };
  NDArray x = scores({2, 4, 4}, 2);
  x.attach_grad();
  {
    autograd::Record r;
    std::vector<NDArray> heads{nd::sum(nd::masked_softmax(x, mask) * w)}, vars{x};
    std::vector<NDArray> g = autograd::grad(heads, vars, {}, true, true);
    autograd::backward({nd::sum(g[0] * v)});
  }
  auto got = x.grad().to_vector<double>();
  const double e = 1e-5;
  auto gp = grad_at(scores({2, 4, 4}, 2) + v * e), gm = grad_at(scores({2, 4, 4}, 2) - v * e);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], (gp[i] - gm[i]) / (2 * e), 1e-6) << i;
}

struct CausalAttentionWeights : nn::HybridBlock {
  NDArray forward(const NDArray& x) override { return nd::masked_softmax(x, nd::causal_mask(x.shape()[1])); }
};

TEST(Masks, HybridizedEqualsImperative) {
  CausalAttentionWeights block;
  NDArray x = scores({3, 6, 6}, 5).astype(DType::kFloat32);
  NDArray want = block(x);
  block.hybridize();
  test::expect_close(block(x), want, 1e-6, "hybridized");
}

TEST(Masks, MaskOfTheWrongShapeNamesBothShapes) {
  std::string msg = test::error_of<ShapeError>([] { nd::masked_softmax(nd::zeros({2, 4, 4}), nd::causal_mask(5)); });
  EXPECT_CONTAINS(msg, "mask [5,5]");
  EXPECT_CONTAINS(msg, "scores [2,4,4]");
  msg = test::error_of<ShapeError>([] { nd::masked_softmax(nd::zeros({4, 4}), nd::ones({2, 4, 4})); });
  EXPECT_CONTAINS(msg, "mask [2,4,4]");
}

}  // namespace
}  // namespace kiln
