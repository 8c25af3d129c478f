// GELU in both forms: LeakyReLU's gelu_tanh against the formula in float64,
// its derivative against central differences of the kernel, how the act_type
// is spelled, and the nn::GELU layer (hybridized, exported and imported).
// Finite-difference first- and second-order checks of the op are in
// higher_order_grad_test with every other op.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <sstream>
#include <vector>

#include "frontend/kiln.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double gelu_erf_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }

std::vector<double> ramp(int n, double lo, double hi) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(lo + (hi - lo) * i / (n - 1));
  return v;
}

TEST(GeluTanh, MatchesTheFormulaInBothDtypes) {
  std::vector<double> x = ramp(1001, -8, 8);
  for (DType t : {DType::kFloat64, DType::kFloat32}) {
    NDArray y = nd::leaky_relu(nd::array(x, Shape{1001}).astype(t), LeakyType::kGeluTanh);
    auto got = y.to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(got[i], gelu_tanh_ref(x[i]), (t == DType::kFloat64 ? 1e-15 : 1e-6) * (1 + std::abs(x[i])))
          << x[i] << " " << dtype_name(t);
  }
}

TEST(GeluTanh, IsCloseToButNotTheErfForm) {
  std::vector<double> x = ramp(201, -5, 5);
  auto a = nd::leaky_relu(nd::array(x, Shape{201}), LeakyType::kGeluTanh).to_vector<double>();
  auto b = nd::leaky_relu(nd::array(x, Shape{201}), LeakyType::kGelu).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(b[i], gelu_erf_ref(x[i]), 1e-14);
    worst = std::max(worst, std::abs(a[i] - b[i]));
  }
  EXPECT_GT(worst, 1e-5);  // the two forms are different functions
  EXPECT_LT(worst, 1e-3);  // that agree closely
}

TEST(GeluTanh, GradientMatchesDifferencesOfTheForward) {
  std::vector<double> x = ramp(41, -6, 6);
  NDArray xa = nd::array(x, Shape{41});
  xa.attach_grad();
  {
    autograd::Record r;
    autograd::backward({nd::sum(nd::leaky_relu(xa, LeakyType::kGeluTanh))});
  }
  auto g = xa.grad().to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    double h = 1e-6, fd = (gelu_tanh_ref(x[i] + h) - gelu_tanh_ref(x[i] - h)) / (2 * h);
    ASSERT_NEAR(g[i], fd, 1e-8) << x[i];
  }
}

// The float32 kernels (eight lanes and a tail) against float64, forward and backward.
TEST(GeluTanh, Float32AgreesWithFloat64) {
  std::vector<double> x = ramp(1003, -9, 9), g = ramp(1003, -2, 2);
  for (bool backward : {false, true}) {
    auto run = [&](DType t) {
      NDArray xa = nd::array(x, Shape{1003}).astype(t);
      if (!backward) return nd::leaky_relu(xa, LeakyType::kGeluTanh).to_vector<double>();
      xa.attach_grad();
      {
        autograd::Record r;
        autograd::backward({nd::sum(nd::leaky_relu(xa, LeakyType::kGeluTanh) * nd::array(g, Shape{1003}).astype(t))});
      }
      return xa.grad().to_vector<double>();
    };
    auto f = run(DType::kFloat32), d = run(DType::kFloat64);
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(f[i], d[i], 2e-6 * (1 + std::abs(d[i]))) << x[i] << " " << backward;
  }
}

// The erf form's float32 kernel (vectorized normal CDF and density) against
// float64's libm erfc: relative to the value in the far negative tail,
// where the output is tiny, and relative to the terms of the derivative
// (which cancel near its zero at x = -0.75).
TEST(Gelu, Float32KernelIsAccurateRelativeToTheValueInTheTail) {
  const int n = 24001;
  std::vector<double> x = ramp(n, -12, 12);
  std::vector<float> x32(x.begin(), x.end());
  std::vector<double> xd(x32.begin(), x32.end());  // the float32 inputs, exactly
  auto forward = [&](DType t) { return nd::leaky_relu(nd::array(xd, Shape{n}).astype(t), LeakyType::kGelu); };
  std::vector<double> f = forward(DType::kFloat32).to_vector<double>(), d = forward(DType::kFloat64).to_vector<double>();
  auto grad = [&](DType t) {
    NDArray xa = nd::array(xd, Shape{n}).astype(t);
    xa.attach_grad();
    {
      autograd::Record r;
      autograd::backward({nd::sum(nd::leaky_relu(xa, LeakyType::kGelu))});
    }
    return xa.grad().to_vector<double>();
  };
  std::vector<double> gf = grad(DType::kFloat32), gd = grad(DType::kFloat64);
  for (int i = 0; i < n; ++i) {
    const double v = xd[static_cast<size_t>(i)], cdf = 0.5 * std::erfc(-v / std::numbers::sqrt2);
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi);
    ASSERT_NEAR(f[static_cast<size_t>(i)], d[static_cast<size_t>(i)], 2e-6 * std::abs(d[static_cast<size_t>(i)]) + 1e-44)
        << "gelu(" << v << ")";
    ASSERT_NEAR(gf[static_cast<size_t>(i)], gd[static_cast<size_t>(i)], 2e-6 * (cdf + std::abs(v) * pdf) + 1e-44)
        << "gelu'(" << v << ")";
  }
}

// Large float16/bfloat16 arrays run oneDNN's eltwise primitives (the CPU
// kernel's header says why): both forms, forward and backward, against
// float64 on the same (rounded) inputs, within one rounding of the result
// plus 1e-6.
TEST(Gelu, LargeSixteenBitArraysAgreeWithFloat64) {
  const int n = 1 << 16;
  std::vector<double> x = ramp(n, -8, 8), g = ramp(n, -2, 2);
  for (DType t : {DType::kBfloat16, DType::kFloat16}) {
    const double eps = t == DType::kBfloat16 ? 1.0 / 256 : 1.0 / 2048;
    // The inputs as the 16-bit arrays hold them.
    std::vector<double> xr = nd::array(x, Shape{n}).astype(t).to_vector<double>();
    std::vector<double> gr = nd::array(g, Shape{n}).astype(t).to_vector<double>();
    for (LeakyType type : {LeakyType::kGelu, LeakyType::kGeluTanh}) {
      NDArray xa = nd::array(xr, Shape{n}).astype(t);
      xa.attach_grad();
      NDArray y;
      {
        autograd::Record r;
        y = nd::leaky_relu(xa, type);
        autograd::backward({nd::sum(y * nd::array(gr, Shape{n}).astype(t))});
      }
      NDArray xd = nd::array(xr, Shape{n});
      xd.attach_grad();
      NDArray yd;
      {
        autograd::Record r;
        yd = nd::leaky_relu(xd, type);
        autograd::backward({nd::sum(yd * nd::array(gr, Shape{n}))});
      }
      auto got = y.to_vector<double>(), want = yd.to_vector<double>();
      auto dgot = xa.grad().to_vector<double>(), dwant = xd.grad().to_vector<double>();
      for (int i = 0; i < n; ++i) {
        const auto u = static_cast<size_t>(i);
        ASSERT_NEAR(got[u], want[u], eps * std::abs(want[u]) + 1e-6) << "x " << xr[u] << " " << dtype_name(t);
        ASSERT_NEAR(dgot[u], dwant[u], eps * std::abs(dwant[u]) + 2e-6) << "x " << xr[u] << " " << dtype_name(t);
      }
    }
  }
}

TEST(GeluTanh, ActTypeSpellings) {
  const OpDef* d = find_op("LeakyReLU");
  ASSERT_NE(d, nullptr);
  OpAttrs a = d->parse_attrs("LeakyReLU", {{"act_type", "gelu_tanh"}});
  EXPECT_EQ(a.as<LeakyReLUAttrs>().act_type, LeakyType::kGeluTanh);
  EXPECT_EQ(a.to_strings().at("act_type"), "gelu_tanh");
  std::string msg = test::error_of<ValueError>([&] { d->parse_attrs("LeakyReLU", {{"act_type", "gelu_sigmoid"}}); });
  EXPECT_CONTAINS(msg, "gelu_tanh");
}

TEST(GeluLayer, ApproximationsPrintingAndBadInput) {
  EXPECT_EQ(nn::GELU().act_type(), LeakyType::kGelu);
  EXPECT_EQ(nn::GELU("none").act_type(), LeakyType::kGelu);
  EXPECT_EQ(nn::GELU("tanh").act_type(), LeakyType::kGeluTanh);
  EXPECT_EQ(nn::GELU().to_string(), "GELU(approximation=erf)");
  EXPECT_EQ(nn::GELU("tanh").to_string(), "GELU(approximation=tanh)");
  std::string msg = test::error_of<ValueError>([] { nn::GELU("fast"); });
  EXPECT_CONTAINS(msg, "'fast'");
}

TEST(GeluLayer, HybridizesExportsAndImports) {
  nn::HybridSequential net;
  net.add(nn::Dense(6, "", true, true, 4), nn::GELU("tanh"), nn::Dense(3, "", true, true, 6), nn::GELU());
  nd::random::seed(9);
  net.initialize(init::Normal(1.0));
  NDArray x = nd::random::normal({5, 4});
  NDArray want = net(x);
  net.hybridize();
  test::expect_close(net(x), want, 1e-6, "hybridized");
  auto dir = std::filesystem::temp_directory_path() / fmt::format("kiln_gelu_{}", ::getpid());
  std::filesystem::create_directories(dir);
  auto [json, params] = net.export_model((dir / "net").string());
  std::stringstream text;
  text << std::ifstream(json).rdbuf();
  EXPECT_CONTAINS(text.str(), "\"act_type\": \"gelu_tanh\"");
  EXPECT_CONTAINS(text.str(), "\"act_type\": \"gelu\"");
  auto back = nn::SymbolBlock::imports(json, {"data"}, params);
  test::expect_close(back(x), want, 1e-6, "imported");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
