// dot, batch_dot and matmul against triple loops over double values, on
// cpu(0) and cpu(1).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "tests/frontend/grad_check.h"

namespace kiln {
namespace {

// c[b] = op(a[b]) . op(b[b]) for `batch` products: a[b] stored [m,k] ([k,m]
// when ta), b[b] stored [k,n] ([n,k] when tb). `scale` gets sum |a||b| per
// output, the size a rounding error is measured against.
std::vector<double> gemm(const std::vector<double>& a, const std::vector<double>& b, int64_t batch, int64_t m,
                         int64_t k, int64_t n, bool ta, bool tb, std::vector<double>* scale = nullptr) {
  std::vector<double> c(batch * m * n, 0.0);
  if (scale) scale->assign(c.size(), 0.0);
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p) {
          double av = a[s * m * k + (ta ? p * m + i : i * k + p)];
          double bv = b[s * k * n + (tb ? j * k + p : p * n + j)];
          c[(s * m + i) * n + j] += av * bv;
          if (scale) (*scale)[(s * m + i) * n + j] += std::abs(av * bv);
        }
  return c;
}

void expect_product(const NDArray& got, const std::vector<double>& want, const std::vector<double>& scale, double rtol,
                    const std::string& what) {
  auto g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], rtol * std::max(1.0, scale[i])) << what << " at " << i;
}

class Linalg : public ::testing::TestWithParam<int> {
 protected:
  Device dev() const { return Device::cpu(GetParam()); }
  NDArray normal(const Shape& s, DType t = DType::kFloat32) {
    return nd::random::normal(s, 0, 1, {.dtype = t, .device = dev()});
  }
};

TEST_P(Linalg, DotOfMatricesWithTransposes) {
  nd::random::seed(10);
  struct Case {
    NDArray a, b, c;
    int64_t m, k, n;
    bool ta, tb;
  };
  std::vector<Case> cases;  // queued first, checked after
  for (int64_t m : {1, 7, 33, 100})
    for (int64_t k : {1, 7, 33, 100})
      for (int64_t n : {1, 7, 33, 100})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            NDArray a = normal(ta ? Shape{k, m} : Shape{m, k});
            NDArray b = normal(tb ? Shape{n, k} : Shape{k, n});
            cases.push_back({a, b, nd::dot(a, b, ta, tb), m, k, n, ta, tb});
          }
  for (auto& c : cases) {
    std::string what = fmt::format("m={} k={} n={} ta={} tb={}", c.m, c.k, c.n, c.ta, c.tb);
    ASSERT_EQ(c.c.shape(), (Shape{c.m, c.n})) << what;
    std::vector<double> scale;
    auto want = gemm(c.a.to_vector<double>(), c.b.to_vector<double>(), 1, c.m, c.k, c.n, c.ta, c.tb, &scale);
    expect_product(c.c, want, scale, 1e-4, what);
  }
}

TEST_P(Linalg, DotLargeInEveryLayout) {
  nd::random::seed(11);
  // 160x700x160 and 300x700x90 are above the size from which AVX2 builds run
  // a product with a transposed first source on OpenBLAS
  // (backends/cpu/openblas_gemm.h); the second is not square, so swapped
  // dimensions or leading dimensions would show.
  for (auto [m, k, n] : {std::tuple{256, 300, 200}, std::tuple{129, 1000, 3}, std::tuple{1, 4096, 513},
                         std::tuple{160, 700, 160}, std::tuple{300, 700, 90}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        NDArray a = normal(ta ? Shape{k, m} : Shape{m, k});
        NDArray b = normal(tb ? Shape{n, k} : Shape{k, n});
        std::vector<double> scale;
        auto want = gemm(a.to_vector<double>(), b.to_vector<double>(), 1, m, k, n, ta, tb, &scale);
        expect_product(nd::dot(a, b, ta, tb), want, scale, 1e-4, fmt::format("{}x{}x{} ta={} tb={}", m, k, n, ta, tb));
      }
  }
}

TEST_P(Linalg, LargeBatchDotWithATransposedSource) {
  nd::random::seed(13);
  const int64_t batch = 2, m = 160, k = 700, n = 160;
  NDArray a = normal({batch, k, m}), b = normal({batch, k, n});
  std::vector<double> scale;
  auto want = gemm(a.to_vector<double>(), b.to_vector<double>(), batch, m, k, n, true, false, &scale);
  expect_product(nd::batch_dot(a, b, true, false), want, scale, 1e-4, "batch_dot ta");
}

TEST_P(Linalg, DotOfVectorsAndNDArrays) {
  nd::random::seed(12);
  NDArray u = normal({1000}), v = normal({1000});
  NDArray s = nd::dot(u, v);
  EXPECT_EQ(s.shape(), Shape{});
  std::vector<double> scale;
  expect_product(s, gemm(u.to_vector<double>(), v.to_vector<double>(), 1, 1, 1000, 1, false, false, &scale), scale,
                 1e-4, "vector . vector");

  NDArray a = normal({5, 7}), w = normal({7});
  NDArray av = nd::dot(a, w);
  EXPECT_EQ(av.shape(), Shape{5});
  expect_product(av, gemm(a.to_vector<double>(), w.to_vector<double>(), 1, 5, 7, 1, false, false, &scale), scale, 1e-4,
                 "matrix . vector");
  NDArray r = normal({5});
  NDArray va = nd::dot(r, a);
  EXPECT_EQ(va.shape(), Shape{7});
  expect_product(va, gemm(r.to_vector<double>(), a.to_vector<double>(), 1, 1, 5, 7, false, false, &scale), scale, 1e-4,
                 "vector . matrix");
  // transpose of a 1-D operand is moot; transpose of the matrix is not.
  expect_product(nd::dot(w, a, false, true),
                 gemm(w.to_vector<double>(), a.to_vector<double>(), 1, 1, 7, 5, false, true, &scale), scale, 1e-4,
                 "vector . matrix^T");

  // N-D: lhs [2,3,4] is [6,4]; rhs [4,5,2] is [4,10]; the output keeps the axes.
  NDArray x = normal({2, 3, 4}), y = normal({4, 5, 2});
  NDArray xy = nd::dot(x, y);
  EXPECT_EQ(xy.shape(), (Shape{2, 3, 5, 2}));
  expect_product(xy, gemm(x.to_vector<double>(), y.to_vector<double>(), 1, 6, 4, 10, false, false, &scale), scale, 1e-4,
                 "N-D");
  // transpose_a on N-D: the first axis contracts, the rest stay.
  NDArray xt = normal({4, 2, 3});
  NDArray xty = nd::dot(xt, y, true);
  EXPECT_EQ(xty.shape(), (Shape{2, 3, 5, 2}));
  expect_product(xty, gemm(xt.to_vector<double>(), y.to_vector<double>(), 1, 6, 4, 10, true, false, &scale), scale,
                 1e-4, "N-D transpose_a");
  // transpose_b on N-D: the last axis contracts, the leading ones stay.
  NDArray yt = normal({5, 2, 4});
  NDArray xyt = nd::dot(x, yt, false, true);
  EXPECT_EQ(xyt.shape(), (Shape{2, 3, 5, 2}));
  expect_product(xyt, gemm(x.to_vector<double>(), yt.to_vector<double>(), 1, 6, 4, 10, false, true, &scale), scale,
                 1e-4, "N-D transpose_b");
}

TEST_P(Linalg, OtherDtypes) {
  nd::random::seed(13);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      NDArray a = normal(ta ? Shape{40, 30} : Shape{30, 40}, DType::kFloat64);
      NDArray b = normal(tb ? Shape{20, 40} : Shape{40, 20}, DType::kFloat64);
      NDArray c = nd::dot(a, b, ta, tb);
      EXPECT_EQ(c.dtype(), DType::kFloat64);
      std::vector<double> scale;
      auto want = gemm(a.to_vector<double>(), b.to_vector<double>(), 1, 30, 40, 20, ta, tb, &scale);
      expect_product(c, want, scale, 1e-12, "float64");
    }
  std::vector<int32_t> av(6 * 5), bv(5 * 4);
  for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<int32_t>(i % 7) - 3;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<int32_t>(i % 5) - 2;
  for (DType t : {DType::kInt32, DType::kInt64}) {
    NDArray a = nd::array(av, {6, 5}, dev()).astype(t), b = nd::array(bv, {5, 4}, dev()).astype(t);
    std::vector<double> ad(av.begin(), av.end()), bd(bv.begin(), bv.end());
    NDArray c = nd::dot(a, b);
    EXPECT_EQ(c.dtype(), t);
    EXPECT_EQ(c.to_vector<double>(), gemm(ad, bd, 1, 6, 5, 4, false, false));
    EXPECT_EQ(nd::dot(b, a, true, true).to_vector<double>(), gemm(bd, ad, 1, 4, 5, 6, true, true));
  }
}

TEST_P(Linalg, BatchDot) {
  nd::random::seed(14);
  for (auto [batch, m, k, n] :
       {std::tuple{1, 1, 1, 1}, std::tuple{3, 7, 33, 1}, std::tuple{4, 33, 7, 100}, std::tuple{2, 100, 100, 33}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        NDArray a = normal(ta ? Shape{batch, k, m} : Shape{batch, m, k});
        NDArray b = normal(tb ? Shape{batch, n, k} : Shape{batch, k, n});
        NDArray c = nd::batch_dot(a, b, ta, tb);
        std::string what = fmt::format("batch={} m={} k={} n={} ta={} tb={}", batch, m, k, n, ta, tb);
        ASSERT_EQ(c.shape(), (Shape{batch, m, n})) << what;
        std::vector<double> scale;
        auto want = gemm(a.to_vector<double>(), b.to_vector<double>(), batch, m, k, n, ta, tb, &scale);
        expect_product(c, want, scale, 1e-4, what);
      }
  }
  // N-D batch_dot: leading axes flatten into the batch.
  NDArray a = normal({2, 3, 4, 5}), b = normal({2, 3, 5, 6});
  NDArray c = nd::batch_dot(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3, 4, 6}));
  std::vector<double> scale;
  expect_product(c, gemm(a.to_vector<double>(), b.to_vector<double>(), 6, 4, 5, 6, false, false, &scale), scale, 1e-4,
                 "4-D batch_dot");
}

TEST_P(Linalg, EmptyOperands) {
  NDArray a = nd::zeros({3, 0}, {.device = dev()}), b = nd::zeros({0, 4}, {.device = dev()});
  EXPECT_EQ(nd::dot(a, b).to_vector<float>(), std::vector<float>(12, 0.0f));
  EXPECT_EQ(nd::dot(b, nd::zeros({4, 2}, {.device = dev()})).shape(), (Shape{0, 2}));
}

TEST_P(Linalg, Matmul) {
  nd::random::seed(15);
  std::vector<double> scale;
  auto check = [&](const NDArray& got, const Shape& shape, const std::vector<double>& want, const char* what) {
    EXPECT_EQ(got.shape(), shape) << what;
    expect_product(got, want, scale, 1e-4, what);
  };
  NDArray u = normal({4}), a = normal({3, 4}), b = normal({4, 5});
  NDArray a3 = normal({2, 3, 4}), b3 = normal({2, 4, 5});
  auto V = [](const NDArray& x) { return x.to_vector<double>(); };
  check(nd::matmul(u, u), Shape{}, gemm(V(u), V(u), 1, 1, 4, 1, false, false, &scale), "1-D @ 1-D");
  check(nd::matmul(a, b), Shape{3, 5}, gemm(V(a), V(b), 1, 3, 4, 5, false, false, &scale), "2-D @ 2-D");
  check(nd::matmul(u, b), Shape{5}, gemm(V(u), V(b), 1, 1, 4, 5, false, false, &scale), "1-D @ 2-D");
  check(nd::matmul(a, u), Shape{3}, gemm(V(a), V(u), 1, 3, 4, 1, false, false, &scale), "2-D @ 1-D");
  check(nd::matmul(a3, b3), (Shape{2, 3, 5}), gemm(V(a3), V(b3), 2, 3, 4, 5, false, false, &scale), "3-D @ 3-D");
  check(nd::matmul(a3, u), (Shape{2, 3}), gemm(V(a3), V(u), 1, 6, 4, 1, false, false, &scale), "3-D @ 1-D");
  check(nd::matmul(a3, b), (Shape{2, 3, 5}), gemm(V(a3), V(b), 1, 6, 4, 5, false, false, &scale), "3-D @ 2-D");
  // Broadcast batch axes: a [3,4] against b3 [2,4,5] is a repeated twice.
  std::vector<double> aa = V(a);
  aa.insert(aa.end(), aa.begin(), aa.end());
  check(nd::matmul(a, b3), (Shape{2, 3, 5}), gemm(aa, V(b3), 2, 3, 4, 5, false, false, &scale), "2-D @ 3-D");
  std::vector<double> uu = V(u);
  uu.insert(uu.end(), uu.begin(), uu.end());
  check(nd::matmul(u, b3), (Shape{2, 5}), gemm(uu, V(b3), 2, 1, 4, 5, false, false, &scale), "1-D @ 3-D");
  // [2,1,3,4] @ [3,4,5] -> [2,3,3,5]: a's axis 1 and b's missing axis broadcast.
  NDArray a4 = normal({2, 1, 3, 4}), c3 = normal({3, 4, 5});
  std::vector<double> a4b, c3b;
  auto a4v = V(a4), c3v = V(c3);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      a4b.insert(a4b.end(), a4v.begin() + i * 12, a4v.begin() + (i + 1) * 12);
      c3b.insert(c3b.end(), c3v.begin() + j * 20, c3v.begin() + (j + 1) * 20);
    }
  check(nd::matmul(a4, c3), (Shape{2, 3, 3, 5}), gemm(a4b, c3b, 6, 3, 4, 5, false, false, &scale), "broadcast");
  EXPECT_THROW(nd::matmul(a3, normal({3, 4, 5})), ShapeError);  // batch 2 vs 3
  EXPECT_THROW(nd::matmul(a, normal({2, 3, 5})), ShapeError);   // k 4 vs 3
}

TEST_P(Linalg, Errors) {
  NDArray a = nd::zeros({2, 3}, {.device = dev()}), b = nd::zeros({4, 5}, {.device = dev()});
  try {
    nd::dot(a, b);
    ADD_FAILURE() << "expected ShapeError";
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("dot"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2,3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4,5]"), std::string::npos) << msg;
  }
  EXPECT_THROW(nd::dot(a, b, true), ShapeError);
  EXPECT_NO_THROW(nd::dot(a, nd::zeros({5, 3}, {.device = dev()}), false, true));
  EXPECT_THROW(nd::dot(nd::zeros({3}), nd::zeros({4})), ShapeError);
  EXPECT_THROW(nd::dot(nd::zeros({3}), nd::zeros({3}), true), ValueError);
  try {
    nd::dot(a, nd::zeros({3, 2}, {.dtype = DType::kFloat64, .device = dev()}));
    ADD_FAILURE() << "expected TypeError";
  } catch (const TypeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("float64"), std::string::npos) << msg;
  }
  EXPECT_THROW(nd::dot(nd::zeros({2, 2}, {.dtype = DType::kUint8}), nd::zeros({2, 2}, {.dtype = DType::kUint8})),
               TypeError);
  EXPECT_THROW(nd::batch_dot(nd::zeros({2, 3, 4}), nd::zeros({3, 4, 5})), ShapeError);
  EXPECT_THROW(nd::batch_dot(nd::zeros({2, 3, 4}), nd::zeros({2, 5, 4})), ShapeError);
  EXPECT_THROW(nd::batch_dot(nd::zeros({3, 4}), nd::zeros({4, 5})), ShapeError);
  EXPECT_NO_THROW(nd::batch_dot(nd::zeros({2, 3, 4}), nd::zeros({2, 5, 4}), false, true));
}

TEST_P(Linalg, ParsesMXNetAttributes) {
  NDArray a = nd::arange(6, {.device = dev()}).reshape({3, 2}), b = nd::arange(6, {.device = dev()}).reshape({2, 3});
  const OpDef& dot = op_def(OpId::kDot);
  OpAttrs attrs =
      dot.parse_attrs(dot.name, {{"transpose_a", "True"}, {"transpose_b", "True"}, {"forward_stype", "None"}});
  NDArray c = invoke1(OpId::kDot, {a, b}, attrs);  // a^T [2,3] . b^T [3,2]
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_EQ(c.to_vector<double>(), gemm(a.to_vector<double>(), b.to_vector<double>(), 1, 2, 3, 2, true, true));
  EXPECT_THROW(invoke1(OpId::kDot, {a, b}, dot.parse_attrs(dot.name, {{"forward_stype", "csr"}})), NotSupported);
  EXPECT_EQ(find_op("batch_dot"), &op_def(OpId::kBatchDot));
}

// Gradients through central differences in float64 (tests/frontend/grad_check.h).
TEST_P(Linalg, Gradients) {
  auto f64 = [&](const Shape& s) { return normal(s, DType::kFloat64); };
  nd::random::seed(16);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(fmt::format("ta={} tb={}", ta, tb));
      NDArray a = f64(ta ? Shape{4, 3} : Shape{3, 4}), b = f64(tb ? Shape{2, 4} : Shape{4, 2});
      testing::check_gradients([&](std::span<const NDArray> x) { return nd::dot(x[0], x[1], ta, tb); }, {a, b});
      NDArray a3 = f64(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}), b3 = f64(tb ? Shape{2, 2, 4} : Shape{2, 4, 2});
      testing::check_gradients([&](std::span<const NDArray> x) { return nd::batch_dot(x[0], x[1], ta, tb); }, {a3, b3});
    }
  auto dot = [](std::span<const NDArray> x) { return nd::dot(x[0], x[1]); };
  testing::check_gradients(dot, {f64({4}), f64({4})});
  testing::check_gradients(dot, {f64({3, 4}), f64({4})});
  testing::check_gradients(dot, {f64({4}), f64({4, 2})});
  testing::check_gradients(dot, {f64({2, 3, 4}), f64({4, 2})});
  testing::check_gradients([](std::span<const NDArray> x) { return nd::dot(x[0], x[1], true, true); },
                           {f64({4, 2, 3}), f64({2, 3, 4})});
  // Only the gradient asked for is computed.
  testing::check_gradients(dot, {f64({3, 4}), f64({4, 2})}, {.no_grad = {0}});
  testing::check_gradients([](std::span<const NDArray> x) { return nd::matmul(x[0], x[1]); },
                           {f64({2, 1, 3, 4}), f64({3, 4, 2})});
}

INSTANTIATE_TEST_SUITE_P(Cpu, Linalg, ::testing::Values(0, 1),
                         [](const auto& info) { return "cpu" + std::to_string(info.param); });

}  // namespace
}  // namespace kiln
