// The nn ops' forward results against loops over double values written here,
// on cpu(0) and cpu(1): FullyConnected, Activation, LeakyReLU, Dropout,
// Flatten, softmax, log_softmax, pick, the fused cross-entropy and add_n.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <string>

#include "frontend/autograd.h"
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

NDArray make(const std::vector<double>& v, const Shape& s, DType t, Device d) {
  NDArray a = nd::array(v, s, d);
  return t == DType::kFloat64 ? a : a.astype(t);
}

void expect_close(const NDArray& got, const std::vector<double>& want, double rtol, double atol,
                  const std::string& what) {
  auto g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], atol + rtol * std::abs(want[i])) << what << " at " << i;
}

class NN : public ::testing::TestWithParam<int> {
 protected:
  Device dev() const { return Device::cpu(GetParam()); }
  NDArray uniform(const Shape& s, double lo, double hi, DType t = DType::kFloat32, uint32_t seed = 1) {
    return make(random_vector(static_cast<size_t>(s.size()), lo, hi, seed), s, t, dev());
  }
};

// ---- FullyConnected

std::vector<double> dense_reference(const std::vector<double>& x, const std::vector<double>& w,
                                    const std::vector<double>* b, int64_t m, int64_t k, int64_t n) {
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = b ? (*b)[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) s += x[i * k + p] * w[j * k + p];
      y[i * n + j] = s;
    }
  return y;
}

TEST_P(NN, FullyConnectedFlattenAndNot) {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    for (bool flatten : {true, false}) {
      for (bool bias : {true, false}) {
        // Small (loops) and large (oneDNN for float32) products.
        for (auto [shape, n] : {std::pair{Shape{4, 3, 5}, int64_t{7}}, std::pair{Shape{64, 2, 150}, int64_t{200}}}) {
          const int64_t k = flatten ? shape.size() / shape[0] : shape[shape.ndim() - 1];
          const int64_t m = shape.size() / k;
          NDArray x = uniform(shape, -1, 1, t, 2), w = uniform({n, k}, -1, 1, t, 3), b = uniform({n}, -1, 1, t, 4);
          NDArray y = nd::fully_connected(x, w, bias ? b : NDArray(), n, flatten);
          Shape want_shape = flatten ? Shape{shape[0], n} : Shape{shape[0], shape[1], n};
          std::string what = fmt::format("{} flatten={} bias={} x={}", t, flatten, bias, shape);
          ASSERT_EQ(y.shape(), want_shape) << what;
          auto bv = b.to_vector<double>();
          auto want = dense_reference(x.to_vector<double>(), w.to_vector<double>(), bias ? &bv : nullptr, m, k, n);
          expect_close(y, want, 1e-5, t == DType::kFloat32 ? 1e-4 : 1e-12, what);
        }
      }
    }
  }
}

TEST_P(NN, FullyConnectedErrorsAtTheCall) {
  NDArray x = uniform({32, 784}, -1, 1), w = uniform({256, 512}, -1, 1), b = uniform({256}, -1, 1);
  try {
    nd::fully_connected(x, w, b, 256);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("FullyConnected"), std::string::npos) << m;
    EXPECT_NE(m.find("[32,784]"), std::string::npos) << m;
    EXPECT_NE(m.find("[256,512]"), std::string::npos) << m;
  }
  NDArray w2 = uniform({256, 784}, -1, 1);
  EXPECT_THROW(nd::fully_connected(x, w2, uniform({255}, -1, 1), 256), ShapeError);
  EXPECT_THROW(nd::fully_connected(x, w2, b, 128), ShapeError);  // num_hidden disagrees with weight
  // Arity follows no_bias.
  EXPECT_THROW(invoke(OpId::kFullyConnected, {x, w2}, OpAttrs::make(FullyConnectedAttrs{.num_hidden = 256})),
               ValueError);
  EXPECT_THROW(nd::fully_connected(x, w2.astype(DType::kFloat64), b, 256), TypeError);
}

// ---- Activation, LeakyReLU

double act_reference(ActType t, double x) {
  switch (t) {
    case ActType::kRelu:
      return std::max(x, 0.0);
    case ActType::kSigmoid:
      return 1 / (1 + std::exp(-x));
    case ActType::kTanh:
      return std::tanh(x);
    case ActType::kSoftrelu:
      return std::log1p(std::exp(x));
    case ActType::kSoftsign:
      return x / (1 + std::abs(x));
  }
  return 0;
}

double leaky_reference(LeakyType t, double slope, double x) {
  const double alpha = 1.6732632423543772848170429916717, lambda = 1.0507009873554804934193349852946;
  switch (t) {
    case LeakyType::kLeaky:
      return x > 0 ? x : slope * x;
    case LeakyType::kElu:
      return x > 0 ? x : slope * (std::exp(x) - 1);
    case LeakyType::kSelu:
      return lambda * (x > 0 ? x : alpha * (std::exp(x) - 1));
    case LeakyType::kGelu:
      return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    default:
      return 0;
  }
}

TEST_P(NN, ActivationEveryType) {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    NDArray x = uniform({3, 1001}, -12, 12, t, 5);  // 1001: vector body and tail
    auto xv = x.to_vector<double>();
    for (ActType a : {ActType::kRelu, ActType::kSigmoid, ActType::kTanh, ActType::kSoftrelu, ActType::kSoftsign}) {
      std::vector<double> want;
      for (double v : xv) want.push_back(act_reference(a, v));
      expect_close(nd::activation(x, a), want, t == DType::kFloat32 ? 2e-6 : 1e-14, 1e-30,
                   fmt::format("{} {}", print_attr(a), t));
    }
  }
}

TEST_P(NN, LeakyReLUEveryType) {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    NDArray x = uniform({7, 13}, -6, 6, t, 6);
    auto xv = x.to_vector<double>();
    for (LeakyType a : {LeakyType::kLeaky, LeakyType::kElu, LeakyType::kSelu, LeakyType::kGelu}) {
      for (double slope : {0.25, 0.01}) {
        std::vector<double> want;
        for (double v : xv) want.push_back(leaky_reference(a, slope, v));
        expect_close(nd::leaky_relu(x, a, slope), want, t == DType::kFloat32 ? 2e-6 : 1e-14, 1e-30,
                     fmt::format("{} slope={} {}", print_attr(a), slope, t));
      }
    }
  }
  EXPECT_THROW(nd::leaky_relu(uniform({2}, -1, 1), LeakyType::kRrelu), NotSupported);
  EXPECT_THROW(nd::leaky_relu(uniform({2}, -1, 1), LeakyType::kPrelu), ValueError);  // needs gamma as a 2nd input
  EXPECT_THROW(nd::activation(nd::zeros({2}, {.dtype = DType::kInt32, .device = dev()}), ActType::kRelu), TypeError);
}

// ---- Dropout

TEST_P(NN, DropoutIsIdentityInPredictMode) {
  NDArray x = uniform({5, 40}, -1, 1);
  autograd::PredictMode predict;
  auto outs = invoke(OpId::kDropout, {x}, OpAttrs::make(DropoutAttrs{.p = 0.5}));
  expect_close(outs[0], x.to_vector<double>(), 0, 0, "out");
  expect_close(outs[1], std::vector<double>(200, 1.0), 0, 0, "mask");
  expect_close(nd::dropout(x, 0.9), x.to_vector<double>(), 0, 0, "nd::dropout");
}

TEST_P(NN, DropoutTrainModeMaskAndScaling) {
  const int64_t n = 200000;
  NDArray x = uniform({n / 100, 100}, 0.5, 1.5);
  for (double p : {0.1, 0.5, 0.8}) {
    autograd::TrainMode train;
    auto outs = invoke(OpId::kDropout, {x}, OpAttrs::make(DropoutAttrs{.p = p, .seed = 7, .offset = 11}));
    auto xv = x.to_vector<double>(), y = outs[0].to_vector<double>(), mask = outs[1].to_vector<double>();
    ASSERT_EQ(outs[1].shape(), x.shape());
    const double scale = static_cast<double>(static_cast<float>(1 / (1 - p)));
    int64_t kept = 0;
    double mask_sum = 0;
    for (size_t i = 0; i < mask.size(); ++i) {
      ASSERT_TRUE(mask[i] == 0 || mask[i] == scale) << "mask " << mask[i] << " at " << i << " p=" << p;
      ASSERT_NEAR(y[i], xv[i] * mask[i], 1e-6 * scale) << i;
      kept += mask[i] != 0;
      mask_sum += mask[i];
    }
    const double keep = 1 - p, sd = std::sqrt(keep * p / n);
    EXPECT_NEAR(static_cast<double>(kept) / n, keep, 5 * sd) << "p=" << p;
    EXPECT_NEAR(mask_sum / n, 1.0, 5 * sd / keep) << "p=" << p;
  }
}

TEST_P(NN, DropoutStreamsAreReproducibleAndAdvance) {
  NDArray x = nd::ones({1000}, {.device = dev()});
  autograd::TrainMode train;
  nd::dropout_seed(3);
  auto a1 = nd::dropout(x, 0.5).to_vector<float>();
  auto a2 = nd::dropout(x, 0.5).to_vector<float>();
  nd::dropout_seed(3);
  auto b1 = nd::dropout(x, 0.5).to_vector<float>();
  EXPECT_EQ(a1, b1);
  EXPECT_NE(a1, a2);
  // The mode "always" applies in predict mode too; p = 1 drops everything.
  autograd::PredictMode predict;
  auto c = nd::dropout(x, 0.5, {}, DropoutMode::kAlways).to_vector<float>();
  EXPECT_NE(c, std::vector<float>(1000, 1.0f));
  EXPECT_EQ(nd::dropout(x, 1.0, {}, DropoutMode::kAlways).to_vector<float>(), std::vector<float>(1000, 0.0f));
  EXPECT_THROW(nd::dropout(x, 1.5), ValueError);
}

TEST_P(NN, DropoutAxesShareTheMask) {
  NDArray x = uniform({4, 6, 50}, 0.5, 1.5);
  autograd::TrainMode train;
  for (IntTuple axes : {IntTuple{1}, IntTuple{0, 2}, IntTuple{-1}}) {
    auto outs = invoke(OpId::kDropout, {x}, OpAttrs::make(DropoutAttrs{.p = 0.5, .axes = axes, .seed = 1}));
    Shape ms = x.shape();
    for (int64_t a : axes) ms[static_cast<int>(a < 0 ? a + 3 : a)] = 1;
    ASSERT_EQ(outs[1].shape(), ms);
    auto xv = x.to_vector<double>(), y = outs[0].to_vector<double>(), mask = outs[1].to_vector<double>();
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 6; ++j)
        for (int64_t k = 0; k < 50; ++k) {
          int64_t mi = ((ms[0] == 1 ? 0 : i) * ms[1] + (ms[1] == 1 ? 0 : j)) * ms[2] + (ms[2] == 1 ? 0 : k);
          int64_t xi = (i * 6 + j) * 50 + k;
          ASSERT_NEAR(y[xi], xv[xi] * mask[mi], 1e-6) << "axes " << axes.size() << " at " << xi;
        }
  }
}

// ---- Flatten

TEST_P(NN, FlattenKeepsTheFirstAxis) {
  NDArray x = uniform({2, 3, 4}, -1, 1);
  NDArray y = nd::flatten(x);
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  expect_close(y, x.to_vector<double>(), 0, 0, "flatten");
  EXPECT_EQ(nd::flatten(uniform({5}, 0, 1)).shape(), (Shape{5, 1}));
  EXPECT_EQ(find_op("flatten"), &op_def(OpId::kFlatten));
}

// ---- softmax, log_softmax

// softmax of x / temperature along `axis` of `shape`, in double.
std::vector<double> softmax_reference(const std::vector<double>& x, const Shape& shape, int axis, double temp,
                                      bool log) {
  int64_t outer = 1, n = shape[axis], inner = 1;
  for (int i = 0; i < axis; ++i) outer *= shape[i];
  for (int i = axis + 1; i < shape.ndim(); ++i) inner *= shape[i];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      auto at = [&](int64_t i) { return (o * n + i) * inner + c; };
      double m = -INFINITY, s = 0;
      for (int64_t i = 0; i < n; ++i) m = std::max(m, x[at(i)] / temp);
      for (int64_t i = 0; i < n; ++i) s += std::exp(x[at(i)] / temp - m);
      for (int64_t i = 0; i < n; ++i)
        y[at(i)] = log ? x[at(i)] / temp - m - std::log(s) : std::exp(x[at(i)] / temp - m) / s;
    }
  return y;
}

TEST_P(NN, SoftmaxAndLogSoftmaxAlongAnyAxis) {
  const Shape shape{3, 37, 5};
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    NDArray x = uniform(shape, -30, 30, t, 8);
    auto xv = x.to_vector<double>();
    for (int axis : {0, 1, 2, -1}) {
      for (std::optional<double> temp : {std::optional<double>{}, std::optional<double>{2.5}}) {
        int ax = axis < 0 ? axis + 3 : axis;
        std::string what = fmt::format("{} axis={} T={}", t, axis, temp.value_or(1));
        double tol = t == DType::kFloat32 ? 1e-5 : 1e-12;
        expect_close(nd::softmax(x, axis, temp), softmax_reference(xv, shape, ax, temp.value_or(1), false), tol,
                     1e-7 * (t == DType::kFloat32 ? 1 : 1e-6), "softmax " + what);
        expect_close(nd::log_softmax(x, axis, temp), softmax_reference(xv, shape, ax, temp.value_or(1), true), tol, tol,
                     "log_softmax " + what);
      }
    }
  }
}

TEST_P(NN, SoftmaxIsStableForLargeInputs) {
  NDArray x = make({1000, 1001, 1002, -1000}, {1, 4}, DType::kFloat32, dev());
  auto p = nd::softmax(x).to_vector<double>();
  auto want = softmax_reference({1000, 1001, 1002, -1000}, {1, 4}, 1, 1, false);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(p[i], want[i], 1e-6);
  auto lp = nd::log_softmax(x).to_vector<double>();
  EXPECT_NEAR(lp[3], -2002.4076059644, 1e-2);
  EXPECT_TRUE(std::isfinite(lp[3]));
}

// ---- pick

TEST_P(NN, PickAlongAnAxisWithClipAndWrap) {
  const Shape shape{4, 5, 3};
  NDArray x = uniform(shape, -1, 1, DType::kFloat32, 9);
  auto xv = x.to_vector<double>();
  for (int axis : {0, 1, -1}) {
    int ax = axis < 0 ? axis + 3 : axis;
    Shape is;
    for (int i = 0; i < 3; ++i)
      if (i != ax) is.push_back(shape[i]);
    std::vector<double> idx = random_vector(static_cast<size_t>(is.size()), -8, 8, 10);
    for (double& v : idx) v = std::trunc(v);
    for (TakeMode mode : {TakeMode::kClip, TakeMode::kWrap}) {
      for (DType it : {DType::kFloat32, DType::kInt32, DType::kInt64}) {
        NDArray index = make(idx, is, it, dev());
        NDArray y = nd::pick(x, index, axis, false, mode);
        ASSERT_EQ(y.shape(), is);
        std::vector<double> want;
        const int64_t n = shape[ax];
        for (int64_t a = 0; a < is[0]; ++a)
          for (int64_t b = 0; b < is[1]; ++b) {
            int64_t k = static_cast<int64_t>(idx[a * is[1] + b]);
            k = mode == TakeMode::kClip ? std::clamp<int64_t>(k, 0, n - 1) : ((k % n) + n) % n;
            int64_t c[3];
            int free_axes[2], f = 0;
            for (int i = 0; i < 3; ++i)
              if (i != ax) free_axes[f++] = i;
            c[free_axes[0]] = a;
            c[free_axes[1]] = b;
            c[ax] = k;
            want.push_back(xv[(c[0] * shape[1] + c[1]) * shape[2] + c[2]]);
          }
        expect_close(y, want, 0, 0, fmt::format("axis={} mode={} index {}", axis, print_attr(mode), it));
      }
    }
  }
  // keepdims, and an index that already has the axis at length 1.
  NDArray index = nd::zeros({4, 1, 3}, {.device = dev()});
  EXPECT_EQ(nd::pick(x, index, 1, true).shape(), (Shape{4, 1, 3}));
  EXPECT_EQ(nd::pick(x, index.reshape({4, 3}), 1, false).shape(), (Shape{4, 3}));
  EXPECT_THROW(nd::pick(x, nd::zeros({4, 4}, {.device = dev()}), 1), ShapeError);
  NDArray bad = nd::pick(x, nd::full({4, 3}, 5, {.device = dev()}), 1, false, TakeMode::kRaise);
  EXPECT_THROW(bad.wait_to_read(), IndexError);
}

// ---- softmax cross-entropy

TEST_P(NN, SoftmaxCrossEntropyMatchesLogSumExp) {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    for (auto [n, c] : {std::pair{int64_t{8}, int64_t{10}}, std::pair{int64_t{300}, int64_t{1000}}}) {
      NDArray x = uniform({n, c}, -20, 20, t, 11);
      std::vector<double> labels = random_vector(static_cast<size_t>(n), 0, static_cast<double>(c), 12);
      for (double& l : labels) l = std::floor(l);
      auto xv = x.to_vector<double>();
      std::vector<double> want;
      for (int64_t i = 0; i < n; ++i) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < c; ++j) m = std::max(m, xv[i * c + j]);
        for (int64_t j = 0; j < c; ++j) s += std::exp(xv[i * c + j] - m);
        want.push_back(m + std::log(s) - xv[i * c + static_cast<int64_t>(labels[i])]);
      }
      for (DType lt : {DType::kFloat32, DType::kInt32}) {
        NDArray loss = nd::softmax_cross_entropy(x, make(labels, {n}, lt, dev()));
        ASSERT_EQ(loss.shape(), (Shape{n}));
        expect_close(loss, want, t == DType::kFloat32 ? 1e-5 : 1e-12, t == DType::kFloat32 ? 1e-5 : 1e-12,
                     fmt::format("{} [{}, {}] labels {}", t, n, c, lt));
      }
    }
  }
}

TEST_P(NN, SoftmaxCrossEntropyLabelOutOfRangeFailsAtRead) {
  NDArray x = uniform({4, 10}, -1, 1);
  for (double bad : {10.0, -1.0}) {
    NDArray labels = make({1, 2, bad, 3}, {4}, DType::kFloat32, dev());
    NDArray loss = nd::softmax_cross_entropy(x, labels);  // queued: the error comes at the read
    try {
      loss.wait_to_read();
      FAIL() << "expected ValueError for label " << bad;
    } catch (const ValueError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(fmt::format("label {}", bad)), std::string::npos) << m;
      EXPECT_NE(m.find("position 2"), std::string::npos) << m;
      EXPECT_NE(m.find("10 classes"), std::string::npos) << m;
    }
  }
  EXPECT_THROW(nd::softmax_cross_entropy(x, nd::zeros({5}, {.device = dev()})), ShapeError);
}

// ---- add_n

TEST_P(NN, AddNSumsEveryInput) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32}) {
    for (int count : {1, 2, 5}) {
      std::vector<NDArray> xs;
      std::vector<double> want(3000, 0.0);
      for (int i = 0; i < count; ++i) {
        auto v = random_vector(3000, -100, 100, 20 + i);
        for (double& e : v) e = std::round(e);
        for (size_t j = 0; j < v.size(); ++j) want[j] += v[j];
        xs.push_back(make(v, {30, 100}, t, dev()));
      }
      expect_close(nd::add_n(xs), want, 1e-6, 0, fmt::format("{} x{}", t, count));
    }
  }
  NDArray a = nd::ones({3}, {.device = dev()});
  EXPECT_THROW(nd::add_n({a, nd::ones({4}, {.device = dev()})}), ShapeError);
  EXPECT_EQ(find_op("ElementWiseSum"), &op_def(OpId::kAddN));
  // The output may be one of the inputs.
  NDArray b = nd::full({3}, 2, {.device = dev()});
  invoke(OpId::kAddN, {a, b}, OpAttrs::make(AddNAttrs{2}), {.out = {&b, 1}});
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{3, 3, 3}));
}

// MXNet's JSON attribute strings parse, and print back only what differs from the defaults.
TEST(NNAttrs, ParseMxnetStringsAndPrintNonDefaults) {
  auto parse = [](std::string_view op, const AttrMap& m) { return find_op(op)->parse_attrs(op, m); };
  OpAttrs fc = parse("FullyConnected", {{"num_hidden", "10"}, {"no_bias", "True"}, {"flatten", "False"}});
  EXPECT_EQ(fc.as<FullyConnectedAttrs>().num_hidden, 10);
  EXPECT_TRUE(fc.as<FullyConnectedAttrs>().no_bias);
  EXPECT_EQ(fc.to_strings(), (AttrMap{{"num_hidden", "10"}, {"no_bias", "True"}, {"flatten", "False"}}));
  EXPECT_THROW(parse("FullyConnected", {{"no_bias", "True"}}), ValueError);  // num_hidden is required

  EXPECT_EQ(parse("Activation", {{"act_type", "softrelu"}}).as<ActivationAttrs>().act_type, ActType::kSoftrelu);
  EXPECT_THROW(parse("Activation", {{"act_type", "swish"}}), ValueError);
  EXPECT_EQ(parse("LeakyReLU", {{"act_type", "gelu_erf"}}).as<LeakyReLUAttrs>().act_type, LeakyType::kGelu);
  EXPECT_EQ(parse("LeakyReLU", {}).to_strings(), AttrMap{});

  OpAttrs drop = parse("Dropout", {{"p", "0.3"}, {"mode", "always"}, {"axes", "()"}, {"cudnn_off", "False"}});
  EXPECT_EQ(drop.as<DropoutAttrs>().mode, DropoutMode::kAlways);
  EXPECT_EQ(drop.to_strings(), (AttrMap{{"p", "0.3"}, {"mode", "always"}}));

  OpAttrs sm = parse("softmax", {{"axis", "1"}, {"temperature", "None"}, {"use_length", "False"}});
  EXPECT_EQ(sm.as<SoftmaxAttrs>().axis, 1);
  EXPECT_FALSE(sm.as<SoftmaxAttrs>().temperature.has_value());
  EXPECT_EQ(parse("log_softmax", {{"temperature", "2.5"}}).as<SoftmaxAttrs>().temperature, 2.5);

  OpAttrs pick = parse("pick", {{"axis", "0"}, {"mode", "wrap"}, {"keepdims", "True"}});
  EXPECT_EQ(pick.as<PickAttrs>().axis, 0);
  EXPECT_EQ(pick.as<PickAttrs>().mode, TakeMode::kWrap);
  EXPECT_EQ(parse("ElementWiseSum", {{"num_args", "3"}}).as<AddNAttrs>().num_args, 3);
}

INSTANTIATE_TEST_SUITE_P(Devices, NN, ::testing::Values(0, 1),
                         [](const auto& info) { return fmt::format("cpu{}", info.param); });

}  // namespace
}  // namespace kiln
