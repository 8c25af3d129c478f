// Mixed precision: autocast at invoke (frontend/amp.h), hybridize's amp
// option (the amp-cast pass), gradients through casts, and bad dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "frontend/amp.h"
#include "frontend/autograd.h"
#include "frontend/kiln.h"
#include "frontend/formats/mxnet/params_io.h"
#include "frontend/train/loss_scaler.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using test::expect_close;

// Conv, BatchNorm, relu, pooling and Dense: every policy class meets.
struct SmallCnn : nn::HybridBlock {
  nn::Conv2D conv{8, 3, 1, 1};
  nn::BatchNorm bn;
  nn::MaxPool2D pool{2};
  nn::Dense fc{5};
  SmallCnn() {
    register_child("conv", conv);
    register_child("bn", bn);
    register_child("pool", pool);
    register_child("fc", fc);
  }
  NDArray forward(const NDArray& x) override { return fc(pool(nd::relu(bn(conv(x))))); }
};

struct StepResult {
  NDArray out, loss;
  std::vector<NDArray> grads;
};

// One training step's forward and backward of `net` under the policy for `amp` (none: float32).
StepResult step(SmallCnn& net, const NDArray& x, const NDArray& labels, std::optional<DType> amp) {
  StepResult r;
  {
    std::optional<amp::Autocast> autocast;
    if (amp) autocast.emplace(*amp);
    autograd::Record record;
    r.out = net(x);
    r.loss = nd::mean(nd::softmax_cross_entropy(r.out, labels));
  }
  autograd::backward({r.loss});
  for (auto& [name, p] : net.collect_params())
    if (p.grad_req() != GradReq::kNull) r.grads.push_back(p.grad().copy());
  return r;
}

class AmpTest : public ::testing::TestWithParam<DType> {};

TEST_P(AmpTest, AutocastRunsLayersInLowPrecisionAndTheLossInFloat32) {
  const DType low = GetParam();
  nd::random::seed(3);
  SmallCnn net;
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({4, 3, 8, 8});
  NDArray labels = nd::array<float>({0, 1, 2, 3}, Shape{4});
  StepResult full = step(net, x, labels, std::nullopt);
  StepResult mixed = step(net, x, labels, low);
  EXPECT_EQ(mixed.out.dtype(), low) << "Dense runs in the 16-bit type";
  EXPECT_EQ(mixed.loss.dtype(), DType::kFloat32) << "softmax cross-entropy runs in float32";
  for (auto& [name, p] : net.collect_params()) EXPECT_EQ(p.data().dtype(), DType::kFloat32) << name;
  ASSERT_EQ(full.grads.size(), mixed.grads.size());
  const double tol = low == DType::kBfloat16 ? 0.05 : 0.01;
  expect_close(mixed.loss, full.loss, tol, "loss");
  // Relative to the gradients' scale: 16-bit rounding of activations
  // perturbs every element a little (the convolution's bias gradient, ~0
  // behind BatchNorm, by as much as the others).
  double scale = 0;
  for (const NDArray& g : full.grads)
    for (double v : g.to_vector<double>()) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < full.grads.size(); ++i) {
    EXPECT_EQ(mixed.grads[i].dtype(), DType::kFloat32) << "gradient " << i << " reaches the float32 parameter";
    std::vector<double> g = mixed.grads[i].to_vector<double>(), w = full.grads[i].to_vector<double>();
    double err = 0;
    for (size_t k = 0; k < w.size(); ++k) err = std::max(err, std::abs(g[k] - w[k]));
    EXPECT_LE(err, tol * scale) << "gradient " << i;
  }
}

TEST_P(AmpTest, HybridizedAgreesWithImperative) {
  const DType low = GetParam();
  nd::random::seed(5);
  SmallCnn net;
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({4, 3, 8, 8});
  NDArray labels = nd::array<float>({4, 3, 2, 1}, Shape{4});
  StepResult imperative = step(net, x, labels, low);
  net.hybridize({.amp = low});
  StepResult hybrid = step(net, x, labels, low);
  EXPECT_EQ(hybrid.out.dtype(), low);
  expect_close(hybrid.out, imperative.out, 1e-6, "output");
  expect_close(hybrid.loss, imperative.loss, 1e-6, "loss");
  for (size_t i = 0; i < hybrid.grads.size(); ++i)
    expect_close(hybrid.grads[i], imperative.grads[i], 1e-5, "gradient " + std::to_string(i));
  // The option alone, without a scope, compiles the block the same way.
  {
    autograd::Record record;
    expect_close(net(x), imperative.out, 1e-6, "output without a scope");
  }
  // A plain hybridize() follows the scope around each call.
  net.hybridize();
  StepResult scoped = step(net, x, labels, low);
  expect_close(scoped.out, imperative.out, 1e-6, "output under a scope");
  // Inference (predict mode: BatchNorm folded in float32, then cast).
  NDArray want, got;
  {
    amp::Autocast autocast(low);
    want = net(x);
  }
  net.hybridize({.amp = low});
  got = net(x);
  EXPECT_EQ(got.dtype(), low);
  const double tol = low == DType::kBfloat16 ? 0.05 : 0.01;
  expect_close(got, want, tol, "predict-mode output (folded BatchNorm)");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AmpTest, ::testing::Values(DType::kBfloat16, DType::kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Amp, AParametersLowPrecisionCopyIsMadeOncePerScope) {
  NDArray w = nd::random::normal({4, 4});
  w.attach_grad();
  NDArray x = nd::random::normal({2, 4});
  const OpDef& fc = op_def(OpId::kDot);
  amp::Autocast autocast(DType::kBfloat16);
  std::vector<NDArray> first, second;
  const NDArray in[] = {x, w};
  ASSERT_TRUE(amp::detail::cast_inputs(fc, in, first));
  ASSERT_TRUE(amp::detail::cast_inputs(fc, in, second));
  EXPECT_EQ(first[1].chunk(), second[1].chunk()) << "the weight's copy is reused";
  EXPECT_NE(first[0].chunk(), second[0].chunk()) << "activations are cast per use";
}

TEST(Amp, ScopesNestAndDisable) {
  EXPECT_FALSE(amp::active());
  {
    amp::Autocast outer(DType::kBfloat16);
    EXPECT_EQ(amp::active(), DType::kBfloat16);
    {
      amp::Autocast off(DType::kBfloat16, false);
      EXPECT_FALSE(amp::active());
      NDArray a = nd::ones({2, 2}), b = nd::ones({2, 2});
      EXPECT_EQ(nd::dot(a, b).dtype(), DType::kFloat32);
    }
    EXPECT_EQ(amp::active(), DType::kBfloat16);
  }
  EXPECT_FALSE(amp::active());
  EXPECT_THROW({ amp::Autocast bad(DType::kFloat32); }, ValueError);
}

TEST(Amp, PromoteMeetsInTheWidestType) {
  amp::Autocast autocast(DType::kBfloat16);
  NDArray a = nd::ones({3}).astype(DType::kBfloat16), b = nd::ones({3});
  EXPECT_EQ((a + b).dtype(), DType::kFloat32);
  NDArray h = nd::ones({3}).astype(DType::kFloat16);
  EXPECT_EQ((a + h).dtype(), DType::kFloat32) << "float16 with bfloat16 meets in float32";
  EXPECT_EQ(nd::exp(a).dtype(), DType::kFloat32) << "exp runs in float32";
  EXPECT_EQ(nd::relu(a).dtype(), DType::kBfloat16) << "relu follows its input";
}

// d/dx sum(2 * cast(x, bf16)) = 2, carried back through the cast in x's dtype.
TEST(Amp, GradientsFlowThroughCasts) {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    NDArray x = nd::array<float>({0.1f, -2.5f, 3.0f}, Shape{3}).astype(t);
    x.attach_grad();
    {
      autograd::Record record;
      NDArray y = nd::sum(x.astype(DType::kBfloat16) * 2.0);
      autograd::backward({y});
    }
    EXPECT_EQ(x.grad().dtype(), t);
    for (double g : x.grad().to_vector<double>()) EXPECT_EQ(g, 2.0);
  }
}

TEST(Amp, MixingDtypesWithoutAutocastNamesBoth) {
  NDArray a = nd::ones({3}).astype(DType::kBfloat16), b = nd::ones({3});
  std::string message = test::error_of<TypeError>([&] { (a + b).wait_to_read(); });
  EXPECT_CONTAINS(message, "bfloat16");
  EXPECT_CONTAINS(message, "float32");
}

TEST(Amp, AnOpWithoutLowPrecisionNamesTheDtypesItTakes) {
  NDArray w = nd::ones({3}).astype(DType::kBfloat16), g = nd::ones({3}).astype(DType::kBfloat16);
  std::string message = test::error_of<TypeError>([&] {
    nd::sgd_update(w, g, {.lr = 0.1});
    w.wait_to_read();
  });
  EXPECT_CONTAINS(message, "sgd_update");
  EXPECT_CONTAINS(message, "bfloat16");
  EXPECT_CONTAINS(message, "float32");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// An inf in a gradient skips the step: parameters and optimizer state
// bit-identical, the scale halved; finite steps update and, after the
// growth interval, double the scale.
TEST(LossScaler, SkipsAStepWithAnInfAndLeavesTheParametersBitIdentical) {
  nd::random::seed(9);
  nn::Dense net(3);
  net.initialize(init::Xavier());
  Trainer trainer(net.collect_params(), optim::SGD({.lr = 0.1, .momentum = 0.9}));
  amp::LossScaler scaler({.init_scale = 1024, .growth_interval = 2});
  auto run = [&](const NDArray& x) {
    NDArray loss;
    {
      amp::Autocast autocast(DType::kFloat16);
      autograd::Record record;
      loss = nd::sum(net(x));
    }
    autograd::backward({scaler.scale_loss(loss)});
    return scaler.step(trainer, 4);
  };
  auto snapshot = [&] {
    std::vector<std::vector<float>> v;
    for (auto& [name, p] : net.collect_params()) v.push_back(p.data().to_vector<float>());
    return v;
  };
  NDArray x = nd::random::normal({4, 5});
  EXPECT_TRUE(run(x));  // first step: momentum state now nonzero
  auto before = snapshot();
  std::vector<float> bad = x.to_vector<float>();
  bad[3] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(run(nd::array<float>(bad, x.shape())));
  EXPECT_EQ(snapshot(), before) << "a skipped step leaves the parameters bit-identical";
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // The momentum state was untouched too: the next finite step matches a
  // trainer that never saw the bad batch.
  EXPECT_TRUE(run(x));
  EXPECT_NE(snapshot(), before);
  EXPECT_TRUE(run(x));
  EXPECT_EQ(scaler.scale(), 1024) << "two clean steps in a row grow the scale";
}

// Gradients are divided by the scale: a scaled step equals an unscaled one.
TEST(LossScaler, ScaledStepEqualsAnUnscaledOne) {
  auto train = [](bool scaled) {
    nd::random::seed(4);
    nn::Dense net(2);
    net.initialize(init::Xavier());
    NDArray x = nd::random::normal({3, 4});
    Trainer trainer(net.collect_params(), optim::SGD({.lr = 0.5}));
    amp::LossScaler scaler({.init_scale = 256});
    NDArray loss;
    {
      autograd::Record record;
      loss = nd::sum(net(x) * net(x));
    }
    if (scaled) {
      autograd::backward({scaler.scale_loss(loss)});
      scaler.step(trainer, 3);
    } else {
      autograd::backward({loss});
      trainer.step(3);
    }
    return net.weight().data().to_vector<float>();
  };
  std::vector<float> a = train(true), b = train(false);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// MXNet's params format with float16 and bfloat16 arrays (type flags 2 and
// 12): written and read back bit for bit.
TEST(AmpFiles, Float16AndBfloat16ParamsRoundTripBitExact) {
  NDArray x = nd::random::normal({3, 5});
  NamedArrays arrays = {{"arg:h", x.astype(DType::kFloat16)}, {"arg:b", x.astype(DType::kBfloat16)}};
  const std::string path = ::testing::TempDir() + "/amp_round_trip.params";
  mxnet::save_ndarrays(path, arrays);
  NamedArrays back = mxnet::load_ndarrays(path);
  ASSERT_EQ(back.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back[i].first, arrays[i].first);
    EXPECT_EQ(back[i].second.dtype(), arrays[i].second.dtype());
    // Compare the raw 16-bit patterns.
    auto bits = [](const NDArray& a) {
      a.wait_to_read();
      const auto* p = static_cast<const uint16_t*>(a.data());
      return std::vector<uint16_t>(p, p + a.size());
    };
    EXPECT_EQ(bits(back[i].second), bits(arrays[i].second));
  }
}

// Block::cast gives a pure low-precision model: layers' parameters in the
// 16-bit type, BatchNorm's in float32; its output is close to float32's.
TEST(AmpFiles, BlockCastRunsInLowPrecision) {
  nd::random::seed(12);
  SmallCnn net;
  net.initialize(init::Xavier());
  NDArray x = nd::random::normal({2, 3, 8, 8});
  NDArray want = net(x);
  net.cast(DType::kBfloat16);
  EXPECT_EQ(net.conv.weight().dtype(), DType::kBfloat16);
  EXPECT_EQ(net.bn.gamma().dtype(), DType::kFloat32);
  NDArray got = net(x.astype(DType::kBfloat16));
  EXPECT_EQ(got.dtype(), DType::kBfloat16);
  expect_close(got.astype(DType::kFloat32), want, 0.05, "bfloat16 model");
  net.hybridize();
  expect_close(net(x.astype(DType::kBfloat16)).astype(DType::kFloat32), want, 0.05, "hybridized bfloat16 model");
}

}  // namespace
}  // namespace kiln
