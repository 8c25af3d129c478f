// Finite-difference checks of every differentiable elemwise op's gradient.
#include <gtest/gtest.h>

#include "grad_check.h"

namespace kiln {
namespace {

using testing::check_gradients;
using Fn = std::function<NDArray(std::span<const NDArray>)>;

NDArray f64(const Shape& s, double lo = -2, double hi = 2) {
  return nd::random::uniform(s, lo, hi, {.dtype = DType::kFloat64});
}
// Values kept away from 0 (log, division, sqrt) and from kinks (relu, abs, clip).
NDArray positive(const Shape& s) { return f64(s, 0.5, 2.0); }
NDArray away_from_zero(const Shape& s) { return f64(s, 0.2, 1.5) * nd::where(f64(s) > 0, nd::ones(s, {.dtype = DType::kFloat64}), -nd::ones(s, {.dtype = DType::kFloat64})); }

TEST(ElemwiseGrad, SameShapeBinary) {
  nd::random::seed(1);
  for (Fn f : std::vector<Fn>{[](auto x) { return x[0] + x[1]; }, [](auto x) { return x[0] - x[1]; },
                              [](auto x) { return x[0] * x[1]; }, [](auto x) { return x[0] / x[1]; }}) {
    check_gradients(f, {f64({2, 3}), positive({2, 3})});
  }
}

TEST(ElemwiseGrad, BroadcastBinarySumsOverBroadcastAxes) {
  nd::random::seed(2);
  for (Fn f : std::vector<Fn>{[](auto x) { return x[0] + x[1]; }, [](auto x) { return x[0] - x[1]; },
                              [](auto x) { return x[0] * x[1]; }, [](auto x) { return x[0] / x[1]; },
                              [](auto x) { return nd::pow(x[0], x[1]); }}) {
    check_gradients(f, {positive({2, 1, 4}), positive({3, 1})});
    check_gradients(f, {positive({4}), positive({2, 4})});
  }
}

TEST(ElemwiseGrad, MaximumMinimumRouteToTheChosenInput) {
  nd::random::seed(3);
  auto a = f64({3, 4}), b = a + 0.5;  // no ties: the finite difference is well defined
  check_gradients([](auto x) { return nd::maximum(x[0], x[1]); }, {a, b});
  check_gradients([](auto x) { return nd::minimum(x[0], x[1]); }, {b, a});
  check_gradients([](auto x) { return nd::maximum(x[0], 0.3) + nd::minimum(x[0], -0.3); }, {away_from_zero({10})});
}

TEST(ElemwiseGrad, ScalarOps) {
  nd::random::seed(4);
  for (Fn f : std::vector<Fn>{[](auto x) { return x[0] + 2.0; }, [](auto x) { return x[0] - 2.0; },
                              [](auto x) { return 2.0 - x[0]; }, [](auto x) { return x[0] * 3.0; },
                              [](auto x) { return x[0] / 4.0; }, [](auto x) { return 3.0 / x[0]; },
                              [](auto x) { return nd::pow(x[0], 3.0); }, [](auto x) { return nd::pow(2.0, x[0]); }}) {
    check_gradients(f, {positive({2, 3})});
  }
}

TEST(ElemwiseGrad, UnaryMath) {
  nd::random::seed(5);
  for (Fn f : std::vector<Fn>{[](auto x) { return nd::exp(x[0]); }, [](auto x) { return nd::log(x[0]); },
                              [](auto x) { return nd::sqrt(x[0]); }, [](auto x) { return nd::square(x[0]); },
                              [](auto x) { return nd::tanh(x[0]); }, [](auto x) { return nd::sigmoid(x[0]); },
                              [](auto x) { return -x[0]; }, [](auto x) { return x[0].copy(); }}) {
    check_gradients(f, {positive({3, 2})});
  }
  for (Fn f : std::vector<Fn>{[](auto x) { return nd::relu(x[0]); }, [](auto x) { return nd::abs(x[0]); },
                              [](auto x) { return nd::clip(x[0], -1.0, 1.0); }}) {
    check_gradients(f, {away_from_zero({4, 3}) * 1.3});
  }
}

// Inputs inside each function's domain and away from its poles.
TEST(ElemwiseGrad, TrigonometricAndHyperbolic) {
  nd::random::seed(8);
  for (Fn f : std::vector<Fn>{[](auto x) { return nd::sin(x[0]); }, [](auto x) { return nd::cos(x[0]); },
                              [](auto x) { return nd::tan(x[0]); }, [](auto x) { return nd::arctan(x[0]); },
                              [](auto x) { return nd::sinh(x[0]); }, [](auto x) { return nd::cosh(x[0]); },
                              [](auto x) { return nd::arcsinh(x[0]); }}) {
    check_gradients(f, {f64({3, 2}, -1.2, 1.2)});
  }
  for (Fn f : std::vector<Fn>{[](auto x) { return nd::arcsin(x[0]); }, [](auto x) { return nd::arccos(x[0]); },
                              [](auto x) { return nd::arctanh(x[0]); }}) {
    check_gradients(f, {f64({3, 2}, -0.8, 0.8)});
  }
  check_gradients([](auto x) { return nd::arccosh(x[0]); }, {f64({3, 2}, 1.2, 3)});
}

// mod and fmod: dy to lhs, -dy * quotient to rhs, with broadcasting; the
// operands keep lhs / rhs away from integers (where the remainder jumps).
TEST(ElemwiseGrad, ModAndFmod) {
  nd::random::seed(9);
  NDArray lhs = nd::array(std::vector<double>{5.3, -5.3, 7.7, -2.6, 0.4, -0.45}, {2, 3});
  NDArray rhs = nd::array(std::vector<double>{2.1, -1.9, 3.2}, {3});
  check_gradients([](auto x) { return nd::mod(x[0], x[1]); }, {lhs, rhs});
  check_gradients([](auto x) { return nd::fmod(x[0], x[1]); }, {lhs, rhs});
}

TEST(ElemwiseGrad, CastAndWhere) {
  nd::random::seed(6);
  check_gradients([](auto x) { return x[0].astype(DType::kFloat32).astype(DType::kFloat64) * 2.0; }, {f64({5})},
                  {.eps = 1e-3, .rtol = 1e-3, .atol = 1e-4});
  auto cond = nd::array(std::vector<double>{1, 0, 1}, {3});
  check_gradients([](auto x) { return nd::where(x[0], x[1], x[2]); }, {cond, f64({2, 3}), f64({3})},
                  {.no_grad = {0}});
}

TEST(ElemwiseGrad, ChainsAndReusedValuesAccumulate) {
  nd::random::seed(7);
  check_gradients([](auto x) { return nd::tanh(x[0] * x[1] + x[0]) * nd::sigmoid(x[1] - 1.0) / (x[0] * x[0] + 1.0); },
                  {f64({3, 3}), f64({3})});
}

}  // namespace
}  // namespace kiln
