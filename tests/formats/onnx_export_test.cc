// ONNX export (frontend/formats/onnx/export.h, nn::export_onnx): hybridized
// models written as ONNX pass libonnx's checker and strict shape inference
// (export.cc checks both) and read back through the importer to the same
// outputs: Kiln -> ONNX -> Kiln.
#include <gtest/gtest.h>

#include <cstdlib>

#include <filesystem>

#include <unistd.h>

#include "frontend/formats/onnx/export.h"
#include "frontend/formats/onnx/model.h"
#include "frontend/nd_conv.h"
#include "ir/ops/conv.h"
#include "frontend/nd.h"
#include "frontend/nn/export_onnx.h"
#include "frontend/nn/lambda.h"
#include "models/zoo.h"
#include "tests/test_util.h"

// Old-opset models (opsets 7 to 12) go through libonnx's version converter,
// which Kiln runs only on request (frontend/formats/onnx/model.cc): these
// files are trusted.
[[maybe_unused]] static const bool kUpgradeOldOpsets = [] { return setenv("KILN_ONNX_UPGRADE", "1", 1) == 0; }();

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::error_of;

double max_abs_diff(const NDArray& a, const NDArray& b) {
  EXPECT_EQ(a.shape(), b.shape());
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double d = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) d = std::max(d, std::abs(static_cast<double>(x[i]) - y[i]));
  return d;
}

struct RoundTrip {
  std::string model;
  Shape input;
};

class OnnxExport : public testing::TestWithParam<RoundTrip> {};

TEST_P(OnnxExport, ReimportsToTheSameOutputs) {
  const RoundTrip& c = GetParam();
  auto net = models::make(c.model, 10);
  net.initialize(init::Xavier());
  nd::random::seed(7);
  NDArray x = nd::random::normal(c.input);
  net.hybridize();
  NDArray want = net(x);
  fs::path path = fs::temp_directory_path() / fmt::format("kiln_onnx_export_{}_{}.onnx", c.model, ::getpid());
  nn::export_onnx(net, path.string());
  onnx::Model m = onnx::Model::load(path.string());
  fs::remove(path);
  EXPECT_EQ(m.opset(), onnx::kExportOpset);
  EXPECT_EQ(m.producer().rfind("kiln", 0), 0u);
  std::vector<NDArray> got = m.run(std::span<const NDArray>(&x, 1));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_LE(max_abs_diff(got[0], want), 1e-6) << c.model;

  // With a dynamic batch the file runs at another batch size too.
  nn::export_onnx(net, path.string(), {.dynamic_batch = true});
  onnx::Model any = onnx::Model::load(path.string());
  fs::remove(path);
  EXPECT_EQ(any.inputs()[0].dim_params[0], "N");
  Shape bigger = c.input;
  bigger[0] += 2;
  NDArray x2 = nd::random::normal(bigger);
  NDArray want2 = net(x2);
  got = any.run(std::span<const NDArray>(&x2, 1));
  EXPECT_LE(max_abs_diff(got[0], want2), 1e-6) << c.model << " at batch " << bigger[0];
}

INSTANTIATE_TEST_SUITE_P(Zoo, OnnxExport,
                         testing::Values(RoundTrip{"mlp", Shape{3, 1, 28, 28}}, RoundTrip{"lenet", Shape{2, 1, 28, 28}},
                                         RoundTrip{"resnet18", Shape{1, 1, 16, 16}}),
                         [](const auto& info) { return info.param.model; });

// Dilated max pooling writes MaxPool's dilations and reads back to the same output.
TEST(OnnxExportPooling, DilatedMaxPoolingRoundTrips) {
  ir::Graph g;
  ir::Entry x = g.add_input("x", TensorType{Shape{1, 2, 9, 10}, DType::kFloat32});
  PoolingAttrs a{.kernel = {3, 2}, .stride = {2, 1}, .pad = {1, 1}, .dilate = {2, 3}};
  g.set_outputs({g.add_op(OpId::kPooling, OpAttrs::make(a), std::vector<ir::Entry>{x}, "pool")[0]});
  std::string bytes = onnx::to_onnx(g, {});
  EXPECT_NE(bytes.find("dilations"), std::string::npos);
  onnx::Model m = onnx::Model::parse(bytes, "pool.onnx");
  nd::random::seed(3);
  NDArray in = nd::random::normal({1, 2, 9, 10});
  NDArray want = nd::pooling(in, a);
  std::vector<NDArray> got = m.run(std::span<const NDArray>(&in, 1));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(max_abs_diff(got[0], want), 0.0);
}

// The trigonometric, hyperbolic, rounding, sign and fmod ops as ONNX ops of
// their own, read back to the same values; floating-point mod (sign of the
// divisor) has no ONNX form.
TEST(OnnxExportOps, ElementwiseMathReimports) {
  nn::HybridLambda f(
      [](const NDArray& x) {
        NDArray t = nd::tanh(x) * 0.9;  // inside (-1, 1)
        NDArray y = nd::sin(x) + nd::cos(x) + nd::tan(t) + nd::arcsin(t) + nd::arccos(t) + nd::arctan(x) +
                    nd::sinh(x) + nd::cosh(x) + nd::arcsinh(x) + nd::arccosh(nd::abs(x) + 1.1) + nd::arctanh(t);
        return y + nd::rint(x * 3.0) + nd::ceil(x) + nd::floor(x) + nd::sign(x) + nd::fmod(x * 4.0, nd::abs(x) + 0.5);
      },
      "math");
  f.hybridize();
  nd::random::seed(3);
  NDArray x = nd::random::normal(Shape{2, 5});
  NDArray want = f(x);
  fs::path path = fs::temp_directory_path() / fmt::format("kiln_onnx_export_math_{}.onnx", ::getpid());
  nn::export_onnx(f, path.string());
  onnx::Model m = onnx::Model::load(path.string());
  fs::remove(path);
  std::vector<NDArray> got = m.run(std::span<const NDArray>(&x, 1));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_LE(max_abs_diff(got[0], want), 1e-5);

  nn::HybridLambda mod([](const NDArray& v) { return nd::mod(v, nd::abs(v) + 0.5); }, "mod");
  mod.hybridize();
  mod(x);
  std::string msg = error_of<NotSupported>([&] { nn::export_onnx(mod, path.string()); });
  EXPECT_NE(msg.find("floating-point mod"), std::string::npos) << msg;
}

TEST(OnnxExportErrors, NeedsATracedGraph) {
  auto net = models::make("mlp", 10);
  net.initialize();
  EXPECT_CONTAINS(error_of<ValueError>([&] { nn::export_onnx(net, "unused.onnx"); }), "call hybridize() and run the block");
}

}  // namespace
}  // namespace kiln
