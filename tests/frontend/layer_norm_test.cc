// LayerNorm: the op's kernels against a float64 reference written out here,
// the fused backward op against the gradient it stands for, the layer
// (hybridized, trained, exported as MXNet's LayerNorm and imported again)
// and bad input. Finite-difference first- and second-order checks of both
// ops are in higher_order_grad_test with every other op.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "frontend/check_hybridize.h"
#include "frontend/kiln.h"
#include "frontend/formats/mxnet/symbol_json.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

NDArray values(Shape s, uint64_t seed, DType dtype, double lo = -2, double hi = 3) {
  return nd::array(test::uniform(s.size(), lo, hi, seed), s).astype(dtype);
}

// out, mean and std along `axis`, in float64, by the definition.
struct Reference {
  std::vector<double> out, mean, sd;
};
Reference reference(const NDArray& x, const NDArray& gamma, const NDArray& beta, int axis, double eps) {
  const Shape& s = x.shape();
  int64_t outer = 1, n = s[axis], inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (int i = axis + 1; i < s.ndim(); ++i) inner *= s[i];
  auto xv = x.to_vector<double>(), g = gamma.to_vector<double>(), b = beta.to_vector<double>();
  Reference r;
  r.out.resize(xv.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      auto at = [&](int64_t i) { return static_cast<size_t>((o * n + i) * inner + c); };
      double m = 0, v = 0;
      for (int64_t i = 0; i < n; ++i) m += xv[at(i)];
      m /= static_cast<double>(n);
      for (int64_t i = 0; i < n; ++i) v += (xv[at(i)] - m) * (xv[at(i)] - m);
      double sd = std::sqrt(v / static_cast<double>(n) + eps);
      for (int64_t i = 0; i < n; ++i) r.out[at(i)] = g[i] * (xv[at(i)] - m) / sd + b[i];
      r.mean.push_back(m);
      r.sd.push_back(sd);
    }
  return r;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " " << i;
}

struct ForwardCase {
  Shape shape;
  int axis;
  DType dtype;
};

TEST(LayerNorm, MatchesTheDefinitionOnEveryAxisAndDtype) {
  for (const ForwardCase& c :
       {ForwardCase{{4, 7, 33}, -1, DType::kFloat64}, ForwardCase{{4, 7, 33}, -1, DType::kFloat32},
        ForwardCase{{3, 5, 6}, 1, DType::kFloat64}, ForwardCase{{3, 5, 6}, 0, DType::kFloat32},
        ForwardCase{{9}, 0, DType::kFloat64}, ForwardCase{{2, 300}, 1, DType::kFloat32}}) {
    SCOPED_TRACE(fmt::format("{} axis {} {}", c.shape, c.axis, dtype_name(c.dtype)));
    int64_t n = c.shape[normalize_axis(c.axis, c.shape.ndim(), "axis")];
    NDArray x = values(c.shape, 1, c.dtype), gamma = values({n}, 2, c.dtype), beta = values({n}, 3, c.dtype);
    auto [y, mean, sd] = nd::layer_norm_all(x, gamma, beta, {.axis = c.axis, .eps = 1e-3});
    Shape stat = c.shape;
    stat[normalize_axis(c.axis, c.shape.ndim(), "axis")] = 1;
    EXPECT_EQ(mean.shape(), stat);
    EXPECT_EQ(sd.shape(), stat);
    EXPECT_EQ(y.dtype(), c.dtype);
    Reference r = reference(x, gamma, beta, normalize_axis(c.axis, c.shape.ndim(), "axis"), 1e-3);
    double tol = c.dtype == DType::kFloat64 ? 1e-12 : 2e-5;
    expect_near_all(y.to_vector<double>(), r.out, tol, "out");
    expect_near_all(mean.to_vector<double>(), r.mean, tol, "mean");
    expect_near_all(sd.to_vector<double>(), r.sd, tol, "std");
  }
}

TEST(LayerNorm, LargeOffsetsDoNotLoseTheVariance) {
  // Two-pass statistics: a row of 1000 + small noise still normalizes to unit variance.
  NDArray x = values({2, 64}, 5, DType::kFloat32, 999, 1001);
  NDArray y = nd::layer_norm(x, nd::ones({64}), nd::zeros({64}), {.eps = 0});
  auto v = y.to_vector<double>();
  for (int r = 0; r < 2; ++r) {
    double ss = 0;
    for (int i = 0; i < 64; ++i) ss += v[static_cast<size_t>(r * 64 + i)] * v[static_cast<size_t>(r * 64 + i)];
    EXPECT_NEAR(ss / 64, 1.0, 1e-3);
  }
}

// The fused backward op equals the gradient of the forward written in
// ordinary ops (autograd through mean, sub, mul, ...), in float64.
TEST(LayerNorm, FusedBackwardMatchesTheGradientOfItsDecomposition) {
  for (int axis : {-1, 1}) {
    SCOPED_TRACE(axis);
    Shape s{3, 6, 5};
    int64_t n = s[normalize_axis(axis, 3, "axis")];
    Shape ps{1, 1, 1};
    ps[normalize_axis(axis, 3, "axis")] = n;
    NDArray x = values(s, 7, DType::kFloat64), gamma = values({n}, 8, DType::kFloat64),
            beta = values({n}, 9, DType::kFloat64), w = values(s, 10, DType::kFloat64);
    auto grads = [&](bool fused) {
      std::vector<NDArray> leaves{x.copy(), gamma.copy(), beta.copy()};
      for (NDArray& l : leaves) l.attach_grad();
      {
        autograd::Record record;
        NDArray y;
        if (fused) {
          y = nd::layer_norm(leaves[0], leaves[1], leaves[2], {.axis = axis, .eps = 1e-4});
        } else {
          NDArray m = nd::mean(leaves[0], IntTuple{axis}, true);
          NDArray d = leaves[0] - m;
          NDArray var = nd::mean(d * d, IntTuple{axis}, true);
          y = d / nd::sqrt(var + 1e-4) * nd::reshape(leaves[1], ps.to_vector()) +
              nd::reshape(leaves[2], ps.to_vector());
        }
        autograd::backward({nd::sum(y * w)});
      }
      return std::vector<NDArray>{leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
    };
    auto want = grads(false), got = grads(true);
    for (int i = 0; i < 3; ++i) test::expect_close(got[i], want[i], 1e-10, fmt::format("gradient {}", i));
  }
}

TEST(LayerNorm, Float32BackwardAgreesWithFloat64) {
  Shape s{64, 48};
  auto run = [&](DType t) {
    NDArray x = values(s, 11, t), g = values({48}, 12, t), b = values({48}, 13, t);
    x.attach_grad();
    g.attach_grad();
    b.attach_grad();
    {
      autograd::Record record;
      autograd::backward({nd::sum(nd::layer_norm(x, g, b) * values(s, 14, t))});
    }
    return std::vector<NDArray>{x.grad(), g.grad(), b.grad()};
  };
  auto d = run(DType::kFloat64), f = run(DType::kFloat32);
  for (int i = 0; i < 3; ++i) test::expect_close(f[i].astype(DType::kFloat64), d[i], 1e-4, fmt::format("grad {}", i));
}

TEST(LayerNorm, BadInputNamesTheShapes) {
  NDArray x = nd::zeros({2, 5});
  std::string msg = test::error_of<ShapeError>([&] { nd::layer_norm(x, nd::ones({4}), nd::zeros({5})); });
  EXPECT_CONTAINS(msg, "gamma has shape [4]");
  EXPECT_CONTAINS(msg, "[2,5]");
  EXPECT_CONTAINS(msg, "LayerNorm");
  msg = test::error_of<IndexError>([&] { nd::layer_norm(x, nd::ones({2}), nd::zeros({2}), {.axis = 2}); });
  EXPECT_CONTAINS(msg, "axis 2 is out of range");
  msg = test::error_of<TypeError>([&] { nd::layer_norm(x.astype(DType::kInt32), nd::ones({5}), nd::zeros({5})); });
  EXPECT_CONTAINS(msg, "int32");
  msg = test::error_of<TypeError>([&] { nd::layer_norm(x, nd::ones({5}).astype(DType::kFloat64), nd::zeros({5})); });
  EXPECT_CONTAINS(msg, "gamma is float64");
  EXPECT_THROW(nn::LayerNorm(-1, -1.0), ValueError);
}

TEST(LayerNorm, EmptyBatchGivesZeroParameterGradients) {
  NDArray x = nd::zeros({0, 4});
  std::vector<NDArray> g = invoke(OpId::kLayerNormBackward, {x, x, nd::ones({4}), nd::zeros({0, 1}), nd::ones({0, 1})},
                                  OpAttrs::make(LayerNormAttrs{}));
  EXPECT_EQ(g[0].shape(), (Shape{0, 4}));
  EXPECT_EQ(g[1].to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(g[2].to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(nd::layer_norm(x, nd::ones({4}), nd::zeros({4})).shape(), (Shape{0, 4}));
  std::string msg = test::error_of<ShapeError>([&] {
    nd::layer_norm(nd::zeros({3, 0}), nd::ones({0}), nd::ones({0}));
  });
  EXPECT_CONTAINS(msg, "length 0 on the normalized axis 1");
}

TEST(LayerNorm, LayerInfersChannelsPrintsAndHonoursScaleAndCenter) {
  nn::LayerNorm norm;
  norm.initialize();
  NDArray x = values({2, 3, 8}, 20, DType::kFloat32);
  NDArray y = norm(x);
  EXPECT_EQ(norm.to_string(), "LayerNorm(in_channels=8, eps=1e-05, axis=-1, center=True, scale=True)");
  Reference r = reference(x, nd::ones({8}), nd::zeros({8}), 2, 1e-5);
  expect_near_all(y.to_vector<double>(), r.out, 2e-5, "out");

  nn::LayerNorm fixed(1, 1e-5, /*center=*/false, /*scale=*/false, 3);
  fixed.initialize();
  EXPECT_EQ(fixed.gamma().grad_req(), GradReq::kNull);
  EXPECT_EQ(fixed.beta().grad_req(), GradReq::kNull);
  std::string msg = test::error_of<ShapeError>([&] { fixed(nd::zeros({2, 4})).wait_to_read(); });
  EXPECT_CONTAINS(msg, "gamma has shape [3]");
}

// A Dense -> LayerNorm -> Dense net: hybridized forward and gradients equal
// the imperative ones; exported as MXNet's LayerNorm and imported again.
struct Net : nn::HybridBlock {
  nn::Dense a{16, "", true, true, 8}, b{4, "", true, true, 16};
  nn::LayerNorm norm{-1, 1e-3};
  Net() {
    register_child("a", a);
    register_child("norm", norm);
    register_child("b", b);
  }
  NDArray forward(const NDArray& x) override { return b(norm(a(x))); }
};

std::vector<std::vector<float>> train_grads(Net& net, const NDArray& x) {
  {
    autograd::Record record;
    autograd::backward({nd::sum(nd::square(net(x)))});
  }
  std::vector<std::vector<float>> g;
  for (auto& [name, p] : net.collect_params()) g.push_back(p.grad().to_vector<float>());
  return g;
}

TEST(LayerNorm, HybridizedEqualsImperativeAndExportsAsMxnetLayerNorm) {
  Net net;
  nd::random::seed(4);
  net.initialize(init::Normal(0.5));
  NDArray x = values({5, 8}, 21, DType::kFloat32);
  std::vector<NDArray> inputs{x};
  EXPECT_FALSE(check_hybridize(net, inputs).has_value());
  NDArray want = net(x);
  auto want_grads = train_grads(net, x);
  net.hybridize();
  test::expect_close(net(x), want, 1e-5, "hybridized forward");
  auto got_grads = train_grads(net, x);
  ASSERT_EQ(got_grads.size(), want_grads.size());
  for (size_t i = 0; i < got_grads.size(); ++i)
    for (size_t j = 0; j < got_grads[i].size(); ++j)
      ASSERT_NEAR(got_grads[i][j], want_grads[i][j], 1e-4 * (1 + std::abs(want_grads[i][j]))) << i << " " << j;

  auto dir = std::filesystem::temp_directory_path() / fmt::format("kiln_layer_norm_{}", ::getpid());
  std::filesystem::create_directories(dir);
  auto [json, params] = net.export_model((dir / "net").string());
  std::stringstream text;
  text << std::ifstream(json).rdbuf();
  EXPECT_CONTAINS(text.str(), "\"op\": \"LayerNorm\"");
  EXPECT_CONTAINS(text.str(), "\"eps\": \"0.001\"");
  auto back = nn::SymbolBlock::imports(json, {"data"}, params);
  test::expect_close(back(x), want, 1e-6, "imported");
  std::filesystem::remove_all(dir);
}

// An MXNet file whose gamma and beta carry no shape: their shapes come from
// the data's length on the axis, as MXNet's shape inference gives them.
TEST(LayerNorm, ImportDeducesGammaAndBetaShapes) {
  const char* text = R"({
    "nodes": [
      {"op": "null", "name": "data", "inputs": []},
      {"op": "null", "name": "ln_gamma", "inputs": []},
      {"op": "null", "name": "ln_beta", "inputs": []},
      {"op": "LayerNorm", "name": "ln", "attrs": {"axis": "1", "eps": "1e-05"}, "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}
    ],
    "arg_nodes": [0, 1, 2],
    "node_row_ptr": [0, 1, 2, 3, 6],
    "heads": [[3, 0, 0]],
    "attrs": {"mxnet_version": ["int", 10901]}
  })";
  std::vector<std::string> inputs{"data"};
  ir::Graph g = mxnet::to_graph(mxnet::parse_symbol_json(text), {{"data", {Shape{2, 3, 4}, DType::kFloat32}}}, inputs);
  EXPECT_EQ(g.type({*g.find("ln_gamma"), 0}).shape, (Shape{3}));
  EXPECT_EQ(g.type({*g.find("ln_beta"), 0}).shape, (Shape{3}));
  EXPECT_EQ(g.type(g.outputs()[0]).shape, (Shape{2, 3, 4}));
}

}  // namespace
}  // namespace kiln
