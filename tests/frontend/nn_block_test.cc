// nn::Block, HybridBlock, Sequential: the DESIGN.md example, deferred
// initialization, structural names, hooks, printing, summary, gradients.
#include <gtest/gtest.h>

#include "tests/test_util.h"

#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/kiln.h"
#include "frontend/nn/nn.h"

namespace kiln {
namespace {

using test::error_of;

// The DESIGN.md custom block.
struct HybridNet : nn::HybridBlock {
  nn::Dense hidden{4}, output{2};
  HybridNet() {
    register_child("hidden", hidden);
    register_child("output", output);
  }
  NDArray forward(const NDArray& x) override { return output(nd::relu(hidden(x))); }
};

// Host reference: relu?(x . w^T + b) for row-major x [m, k], w [n, k].
std::vector<double> dense_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                              int64_t m, int64_t k, int64_t n, bool relu) {
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = b.empty() ? 0 : b[j];
      for (int64_t t = 0; t < k; ++t) s += x[i * k + t] * w[j * k + t];
      y[i * n + j] = relu ? std::max(s, 0.0) : s;
    }
  }
  return y;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(NnBlock, DesignExampleRuns) {
  nd::random::seed(7);
  auto net = nn::HybridSequential();
  net.add(nn::Dense(256, "relu"), nn::Dense(128, "relu"), nn::Dense(2));
  net.initialize();
  auto x = nd::random::normal({1, 512});
  auto y = net(x);
  EXPECT_EQ(y.shape(), (Shape{1, 2}));
  net.hybridize();
  EXPECT_TRUE(net.is_hybridized());
  EXPECT_TRUE(net.at<nn::Dense>(0).is_hybridized());  // applies to the children
  auto y2 = net(x);
  EXPECT_EQ(y.to_vector<float>(), y2.to_vector<float>());

  // The same values by hand, layer by layer.
  auto params = net.collect_params();
  std::vector<double> h = x.to_vector<double>();
  int64_t k = 512;
  for (int layer = 0; layer < 3; ++layer) {
    auto w = params[fmt::format("{}.weight", layer)].data();
    auto b = params[fmt::format("{}.bias", layer)].data();
    int64_t n = w.shape()[0];
    h = dense_ref(h, w.to_vector<double>(), b.to_vector<double>(), 1, k, n, layer < 2);
    k = n;
  }
  expect_near_all(y.to_vector<double>(), h, 1e-4);
}

TEST(NnBlock, CustomBlockForwardAndNames) {
  nd::random::seed(3);
  HybridNet net;
  net.initialize(init::Normal(0.5));
  auto x = nd::random::normal({3, 5});
  auto y = net(x);
  ASSERT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(net.collect_params().names(),
            (std::vector<std::string>{"hidden.weight", "hidden.bias", "output.weight", "output.bias"}));
  auto w1 = net.hidden.weight().data().to_vector<double>(), b1 = net.hidden.bias().data().to_vector<double>();
  auto w2 = net.output.weight().data().to_vector<double>(), b2 = net.output.bias().data().to_vector<double>();
  auto h = dense_ref(x.to_vector<double>(), w1, b1, 3, 5, 4, true);
  expect_near_all(y.to_vector<double>(), dense_ref(h, w2, b2, 3, 4, 2, false), 1e-5);

  // Through a parent that holds a copy, and through a copy of that parent.
  nn::HybridSequential seq;
  seq.add(net, nn::Dense(3));
  seq.initialize();
  nn::HybridSequential copy = seq;
  auto z1 = seq(x), z2 = copy(x);
  EXPECT_EQ(z1.to_vector<float>(), z2.to_vector<float>());
  EXPECT_EQ(seq.collect_params().names(),
            (std::vector<std::string>{"0.hidden.weight", "0.hidden.bias", "0.output.weight", "0.output.bias",
                                      "1.weight", "1.bias"}));
  // The stored child shares state with `net`: the same parameters.
  EXPECT_TRUE(seq.collect_params()["0.hidden.weight"] == net.hidden.weight());
  EXPECT_EQ(seq[0].type_name(), "HybridNet");
}

TEST(NnBlock, DeferredInitialization) {
  nn::Dense d(4);
  EXPECT_EQ(d.weight().shape(), (Shape{4, 0}));
  // Before initialize(): the error names the parameter and says what to do.
  std::string e1 = error_of<ValueError>([&] { d.weight().data(); });
  EXPECT_CONTAINS(e1, "'weight'");
  EXPECT_CONTAINS(e1, "initialize()");

  nn::HybridSequential net;
  net.add(d);
  net.initialize();
  EXPECT_TRUE(d.weight().is_deferred());
  EXPECT_FALSE(d.weight().is_initialized());
  EXPECT_TRUE(d.bias().is_initialized());  // its shape was known
  std::string e2 = error_of<ValueError>([&] { d.weight().data(); });
  EXPECT_CONTAINS(e2, "'0.weight'");
  EXPECT_CONTAINS(e2, "first forward");

  auto y = net(nd::ones({2, 3, 2}));
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
  EXPECT_EQ(d.weight().shape(), (Shape{4, 6}));
  EXPECT_TRUE(d.weight().is_initialized());
  EXPECT_EQ(d.weight().data().shape(), (Shape{4, 6}));
  EXPECT_EQ(d.weight().grad().shape(), (Shape{4, 6}));
  EXPECT_EQ(d.to_string(), "Dense(6 -> 4, linear)");

  // A later input of another size does not fit the inferred weight.
  for (int repeat = 0; repeat < 2; ++repeat) {  // every failing call names the block, once
    std::string e3 = error_of<ShapeError>([&] { net(nd::ones({2, 5})); });
    EXPECT_EQ(e3.rfind("Dense '0': ", 0), 0u) << e3;
    EXPECT_EQ(e3.find("Dense '0'", 1), std::string::npos) << e3;
    EXPECT_CONTAINS(e3, "FullyConnected");
  }
}

TEST(NnBlock, StableNamesAcrossInstances) {
  auto make = [] {
    nn::HybridSequential net;
    nn::HybridSequential inner;
    inner.add(nn::Dense(3), nn::Dense(2));
    net.add(nn::Dense(4, "relu"), inner, HybridNet());
    return net;
  };
  auto a = make(), b = make();
  std::vector<std::string> want{"0.weight", "0.bias",          "1.0.weight",    "1.0.bias",        "1.1.weight",
                                "1.1.bias", "2.hidden.weight", "2.hidden.bias", "2.output.weight", "2.output.bias"};
  EXPECT_EQ(a.collect_params().names(), want);
  EXPECT_EQ(b.collect_params().names(), want);
  EXPECT_FALSE(a.collect_params()["0.weight"] == b.collect_params()["0.weight"]);
}

TEST(NnBlock, SelectByRegex) {
  nn::HybridSequential net;
  net.add(nn::Dense(4), nn::Dense(2), HybridNet());
  auto w = net.collect_params().select(".*weight");
  EXPECT_EQ(w.names(), (std::vector<std::string>{"0.weight", "1.weight", "2.hidden.weight", "2.output.weight"}));
  EXPECT_EQ(net.collect_params("2\\.").names(),
            (std::vector<std::string>{"2.hidden.weight", "2.hidden.bias", "2.output.weight", "2.output.bias"}));
  EXPECT_EQ(net.collect_params("1.bias").size(), 1u);
  EXPECT_TRUE(net.collect_params("nothing").empty());
  EXPECT_THROW(net.collect_params().select("(unclosed"), ValueError);
}

TEST(NnBlock, SharedParametersAreCollectedOnce) {
  nn::Dense shared(3, "", true, true, 3);
  nn::HybridSequential net;
  net.add(shared, nn::Dense(3, "", true, true, 3), shared);
  // The same child twice: one set of parameters, under the first path.
  EXPECT_EQ(net.collect_params().names(), (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
  net.initialize();
  auto y = net(nd::ones({1, 3}));
  EXPECT_EQ(y.shape(), (Shape{1, 3}));
}

TEST(NnBlock, CopiesShareState) {
  nn::Dense a(3, "", true, true, 2);
  nn::Dense b = a;
  b.initialize(init::One());
  EXPECT_TRUE(a.weight().is_initialized());
  EXPECT_EQ(a(nd::ones({1, 2})).to_vector<float>(), (std::vector<float>{2, 2, 2}));
  nn::Dense moved = std::move(b);
  EXPECT_TRUE(moved.same_as(a));
  EXPECT_TRUE(b.same_as(a));  // a move is a copy: the source stays usable
}

TEST(NnBlock, RegistrationErrors) {
  nn::HybridSequential net;
  std::string e = error_of<ValueError>([&] { net.register_child("a.b", nn::Dense(2)); });
  EXPECT_CONTAINS(e, "'a.b'");
  net.register_child("x", nn::Dense(2));
  EXPECT_CONTAINS(error_of<ValueError>([&] { net.register_child("x", nn::Dense(2)); }), "already registered");
  EXPECT_CONTAINS(error_of<ValueError>([&] { net.register_parameter("", nn::Parameter("p", Shape{1})); }), "non-empty");
  EXPECT_THROW(net.register_child("self", net), ValueError);
  // A HybridBlock takes only HybridBlocks.
  std::string e2 = error_of<ValueError>([&] { net.add(nn::Lambda([](const NDArray& x) { return x; })); });
  EXPECT_CONTAINS(e2, "Lambda");
  EXPECT_CONTAINS(e2, "HybridLambda");
  nn::Sequential plain;
  plain.add(nn::Lambda([](const NDArray& x) { return x * 2.0; }), nn::Dense(2));
  EXPECT_EQ(plain.size(), 2u);
  EXPECT_THROW(plain[2], IndexError);
  EXPECT_THROW(plain.at<nn::Dense>(0), TypeError);
  EXPECT_THROW(plain.child("nope"), IndexError);
}

struct NoForward : nn::Block {};

struct AddTwo : nn::Block {
  std::vector<NDArray> forward(std::span<const NDArray> xs) override { return {xs[0] + xs[1], xs[0] - xs[1]}; }
};

TEST(NnBlock, ForwardOverloads) {
  NoForward nf;
  EXPECT_CONTAINS(error_of<NotSupported>([&] { nf(nd::ones({1})); }), "overrides neither");
  AddTwo add;
  std::vector<NDArray> in{nd::full({2}, 3.0), nd::ones({2})};
  auto out = add(std::span<const NDArray>(in));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{4, 4}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{2, 2}));
  // One input through the multi-input forward: AddTwo reads xs[1], so use a block that takes one.
  nn::Dense d(2, "", true, true, 2);
  d.initialize(init::One());
  std::vector<NDArray> one{nd::ones({1, 2})};
  EXPECT_EQ(d(std::span<const NDArray>(one))[0].to_vector<float>(), (std::vector<float>{2, 2}));
  EXPECT_CONTAINS(error_of<ValueError>([&] { d(std::span<const NDArray>(in)); }), "2 inputs");
  // Sequential passes several outputs on.
  nn::Sequential seq;
  seq.add(AddTwo(), AddTwo());
  auto r = seq(std::span<const NDArray>(in));
  EXPECT_EQ(r[0].to_vector<float>(), (std::vector<float>{6, 6}));  // (4) + (2)
  EXPECT_EQ(r[1].to_vector<float>(), (std::vector<float>{2, 2}));  // (4) - (2)
}

TEST(NnBlock, HooksAndApply) {
  nn::HybridSequential net;
  net.add(nn::Dense(2, "", true, true, 3), nn::Dense(1, "", true, true, 2));
  net.initialize();
  std::vector<std::string> calls;
  auto pre = net.register_forward_pre_hook(
      [&](nn::Block& b, std::span<const NDArray> in) { calls.push_back("pre " + b.type_name()); });
  auto post =
      net[1].register_forward_hook([&](nn::Block& b, std::span<const NDArray> in, std::span<const NDArray> out) {
        calls.push_back(fmt::format("post {} {}", b.type_name(), out[0].shape().to_string()));
      });
  net(nd::ones({4, 3}));
  EXPECT_EQ(calls, (std::vector<std::string>{"pre HybridSequential", "post Dense [4,1]"}));
  pre.detach();
  post.detach();
  post.detach();  // twice is harmless
  net(nd::ones({4, 3}));
  EXPECT_EQ(calls.size(), 2u);

  std::vector<std::string> order;
  net.apply([&](nn::Block& b) { order.push_back(b.type_name()); });
  EXPECT_EQ(order, (std::vector<std::string>{"Dense", "Dense", "HybridSequential"}));
}

TEST(NnBlock, Printing) {
  nn::HybridSequential net;
  net.add(nn::Dense(256, "relu", true, true, 512), nn::Dense(10));
  EXPECT_EQ(net.to_string(),
            "HybridSequential(\n  (0): Dense(512 -> 256, Activation(relu))\n  (1): Dense(None -> 10, linear)\n)");
  nn::Sequential outer;
  outer.add(net, nn::Lambda([](const NDArray& x) { return x; }, "identity"));
  std::ostringstream os;
  os << outer;
  EXPECT_EQ(os.str(),
            "Sequential(\n"
            "  (0): HybridSequential(\n"
            "    (0): Dense(512 -> 256, Activation(relu))\n"
            "    (1): Dense(None -> 10, linear)\n"
            "  )\n"
            "  (1): Lambda(identity)\n"
            ")");
  HybridNet h;
  EXPECT_EQ(h.to_string(), "HybridNet(\n  (hidden): Dense(None -> 4, linear)\n  (output): Dense(None -> 2, linear)\n)");
  EXPECT_EQ(nn::Block().to_string(), "Block()");
}

TEST(NnBlock, Summary) {
  nn::HybridSequential net;
  net.add(nn::Dense(256, "relu"), nn::Dense(10));
  net.initialize();
  std::string s = net.summary(nd::ones({1, 512}));
  std::string dash(80, '-'), eq(80, '=');
  std::string want = dash + "\n" +
                     "        Layer (type)                                Output Shape         Param #\n" + eq + "\n" +
                     "               Input                                    (1, 512)               0\n"
                     "             Dense-1                                    (1, 256)          131328\n"
                     "             Dense-2                                     (1, 10)            2570\n" +
                     eq + "\n" +
                     "Parameters in forward computation graph, duplicate included\n"
                     "   Total params: 133898\n"
                     "   Trainable params: 133898\n"
                     "   Non-trainable params: 0\n"
                     "Shared params in forward computation graph: 0\n"
                     "Unique parameters in model: 133898\n" +
                     dash + "\n";
  EXPECT_EQ(s, want);
  // The hooks are gone afterwards: a second summary counts the same.
  EXPECT_EQ(net.summary(nd::ones({1, 512})), want);
}

// Gradients reach every parameter and match central differences (float64).
TEST(NnBlock, GradientsMatchFiniteDifferences) {
  nd::random::seed(11);
  nn::HybridSequential net;
  net.add(nn::Dense(3, "tanh", true, true, 4, std::nullopt, init::Zero(), DType::kFloat64),
          nn::Dense(2, "", true, true, 3, std::nullopt, init::Normal(0.3), DType::kFloat64));
  net.initialize(init::Normal(0.5));
  NDArray x = nd::random::normal({5, 4}, 0, 1, {.dtype = DType::kFloat64});
  NDArray w = nd::random::uniform({5, 2}, 0.5, 1.5, {.dtype = DType::kFloat64});
  std::vector<double> wv = w.to_vector<double>();
  // loss = sum(net(x) * w): its gradient is backward with head gradient w.
  auto loss = [&] {
    std::vector<double> y = net(x).to_vector<double>();
    return std::inner_product(y.begin(), y.end(), wv.begin(), 0.0);
  };

  NDArray y;
  {
    autograd::Record record;
    y = net(x);
  }
  std::vector<NDArray> heads{y}, head_grads{w};
  autograd::backward(heads, head_grads);
  for (auto& [name, p] : net.collect_params()) {
    std::vector<double> analytic = p.grad().to_vector<double>();
    std::vector<double> base = p.data().to_vector<double>();
    ASSERT_EQ(analytic.size(), base.size()) << name;
    const double eps = 1e-6;
    for (size_t i = 0; i < base.size(); ++i) {
      auto at = [&, &p = p](double delta) {  // clang 14 captures no structured binding
        std::vector<double> v = base;
        v[i] += delta;
        nn::Parameter q = p;
        q.set_data(nd::array(v, p.shape()));
        return loss();
      };
      double numeric = (at(eps) - at(-eps)) / (2 * eps);
      EXPECT_NEAR(analytic[i], numeric, 1e-6 + 1e-5 * std::fabs(numeric)) << name << " element " << i;
    }
    nn::Parameter q = p;
    q.set_data(nd::array(base, p.shape()));
  }
  // zero_grad clears every buffer.
  net.zero_grad();
  for (auto& [name, p] : net.collect_params()) {
    for (double g : p.grad().to_vector<double>()) EXPECT_EQ(g, 0.0) << name;
  }
}

TEST(NnBlock, GradReqAddAccumulates) {
  nn::Dense d(1, "", false, true, 2);
  d.initialize(init::One());
  d.collect_params().set_grad_req(GradReq::kAdd);
  NDArray x = nd::array(std::vector<float>{1, 2}, {1, 2});
  for (int i = 0; i < 2; ++i) {
    NDArray y;
    {
      autograd::Record record;
      y = d(x);
    }
    autograd::backward({y});
  }
  EXPECT_EQ(d.weight().grad().to_vector<float>(), (std::vector<float>{2, 4}));
  d.collect_params().set_grad_req(GradReq::kNull);
  EXPECT_THROW(d.weight().grad(), ValueError);
}

}  // namespace
}  // namespace kiln
