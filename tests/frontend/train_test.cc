// Training end to end: losses, optimizers and Trainer, models, the main job.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "frontend/autograd.h"
#include "frontend/data/fashion_mnist.h"
#include "frontend/nd.h"
#include "frontend/train/loss.h"
#include "frontend/train/trainer.h"
#include "models/train_job.h"
#include "models/zoo.h"

namespace kiln {
namespace {

TEST(Loss, MatchesReferenceFormulas) {
  auto pred = nd::array(std::vector<float>{1, 2, 3, 0, 0, 0}, {2, 3});
  auto label = nd::array(std::vector<float>{2, 0});
  auto ce = loss::SoftmaxCrossEntropy{}(pred, label).to_vector<double>();
  double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(ce[0], lse0 - 3.0, 1e-5);
  EXPECT_NEAR(ce[1], std::log(3.0), 1e-5);
  auto target = nd::array(std::vector<float>{0, 2, 3, 1, 0, 0}, {2, 3});
  auto l2 = loss::L2Loss{}(pred, target).to_vector<double>();
  EXPECT_NEAR(l2[0], 0.5 * (1 + 0 + 0) / 3, 1e-6);
  EXPECT_NEAR(l2[1], 0.5 * 1 / 3.0, 1e-6);
  auto l1 = loss::L1Loss{}(pred, target).to_vector<double>();
  EXPECT_NEAR(l1[0], 1.0 / 3, 1e-6);
  auto logits = nd::array(std::vector<float>{-2, 0.5f}, {2, 1});
  auto z = nd::array(std::vector<float>{1, 0}, {2, 1});
  auto bce = loss::SigmoidBinaryCrossEntropy{}(logits, z).to_vector<double>();
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  EXPECT_NEAR(bce[0], -std::log(sig(-2)), 1e-5);
  EXPECT_NEAR(bce[1], -std::log(1 - sig(0.5)), 1e-5);
}

TEST(Trainer, StepRescalesByBatchSizeLikeGluon) {
  nn::Dense fc(1, "", false, true, 2);
  fc.initialize(init::One());
  Trainer trainer(fc.collect_params(), optim::SGD({.lr = 0.5}));
  auto x = nd::array(std::vector<float>{1, 2, 3, 4}, {2, 2});
  NDArray y;
  {
    autograd::Record r;
    y = fc(x);  // [3, 7]
  }
  autograd::backward({y});  // d/dw sum = [1+3, 2+4]
  trainer.step(2);
  EXPECT_EQ(fc.weight().data().to_vector<float>(), (std::vector<float>{1 - 0.5f * 4 / 2, 1 - 0.5f * 6 / 2}));
}

TEST(Trainer, SmallMlpConvergesOnSyntheticData) {
  nd::random::seed(3);
  // y = 1 if x0 + x1 > 0 else 0, 2-class softmax.
  auto x = nd::random::normal({256, 2});
  auto xs = x.to_vector<float>();
  std::vector<float> ys(256);
  for (size_t i = 0; i < 256; ++i) ys[i] = xs[2 * i] + xs[2 * i + 1] > 0 ? 1.0f : 0.0f;
  auto y = nd::array(ys);
  nn::HybridSequential net;
  net.add(nn::Dense(16, "relu"), nn::Dense(2));
  net.initialize(init::Xavier());
  Trainer trainer(net.collect_params(), optim::SGD({.lr = 0.5, .momentum = 0.9}));
  loss::SoftmaxCrossEntropy ce;
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    NDArray l;
    {
      autograd::Record r;
      l = ce(net(x), y);
    }
    autograd::backward({l});
    trainer.step(256);
    double v = nd::mean(l).item<double>();
    if (step == 0) first = v;
    last = v;
  }
  EXPECT_LT(last, 0.2 * first) << "first " << first << " last " << last;
}

TEST(Optimizer, StatesSaveAndLoadRoundTrip) {
  auto path = (std::filesystem::temp_directory_path() / "kiln_opt_states.params").string();
  auto w = nd::array(std::vector<float>{1, 2, 3});
  auto g = nd::array(std::vector<float>{0.5f, -1, 2});
  optim::Adam a({.lr = 0.1});
  a.begin_step();
  a.update(7, w, g, 1.0);
  a.save_states(path);
  optim::Adam b({.lr = 0.1});
  b.load_states(path);
  EXPECT_EQ(b.num_update(), 1);
  auto w1 = w.copy(), w2 = w.copy();
  a.begin_step();
  a.update(7, w1, g, 1.0);
  b.begin_step();
  b.update(7, w2, g, 1.0);
  EXPECT_EQ(w1.to_vector<float>(), w2.to_vector<float>());  // same moments, same step count
  optim::SGD sgd({.lr = 0.1, .momentum = 0.9});
  EXPECT_THROW(sgd.load_states(path), IOError);  // saved by Adam
  std::filesystem::remove(path);
}

TEST(Models, ShapesAndParameterCounts) {
  auto x = nd::random::normal({2, 1, 28, 28});
  auto lenet = models::lenet();
  lenet.initialize();
  EXPECT_EQ(lenet(x).shape(), (Shape{2, 10}));
  // conv 20x1x3x3+20, conv 50x20x5x5+50, dense 128x(50*4*4)+128, dense 10x128+10
  EXPECT_EQ(lenet.collect_params().total_size(), 200 + 25050 + 102528 + 1290);
  auto res = models::resnet18(10);
  res.initialize();
  EXPECT_EQ(res(x).shape(), (Shape{2, 10}));
  auto v1 = models::resnet18_v1(1000);
  v1.initialize();
  EXPECT_EQ(v1(nd::random::normal({1, 3, 64, 64})).shape(), (Shape{1, 1000}));
  // torchvision's resnet18 has the same 11,689,512 learned values; Gluon adds
  // 9,600 BatchNorm running statistics (aux states).
  int64_t learned = v1.collect_params(".*(weight|bias|gamma|beta)").total_size();
  EXPECT_EQ(learned, 11689512);
  EXPECT_THROW(models::make("vgg"), ValueError);
}

TEST(MainJob, LeNetOnAFashionMnistSliceBeatsChance) {
  if (!std::filesystem::exists(data::FashionMNIST::default_dir() + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  models::TrainConfig cfg{.model = "lenet", .epochs = 2, .batch_size = 64, .lr = 0.1, .momentum = 0.9, .seed = 1,
                          .train_limit = 2000, .test_limit = 1000};
  auto history = models::train(cfg);
  ASSERT_EQ(history.size(), 2u);
  EXPECT_LT(history[1].loss, history[0].loss);
  EXPECT_GT(history[1].test_acc, 0.5);  // chance is 0.1
}

// The same slice under mixed precision (--amp): bfloat16 imperative and
// hybridized (the two agree step for step), float16 with loss scaling.
TEST(MainJob, LeNetTrainsUnderMixedPrecision) {
  if (!std::filesystem::exists(data::FashionMNIST::default_dir() + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  std::vector<double> losses;
  for (auto [amp, hybridize] : {std::pair{DType::kBfloat16, false}, std::pair{DType::kBfloat16, true},
                                std::pair{DType::kFloat16, false}}) {
    models::TrainConfig cfg{.model = "lenet", .epochs = 2, .batch_size = 64, .lr = 0.1, .momentum = 0.9, .seed = 1,
                            .train_limit = 2000, .test_limit = 1000, .hybridize = hybridize, .amp = amp};
    auto history = models::train(cfg);
    ASSERT_EQ(history.size(), 2u);
    EXPECT_LT(history[1].loss, history[0].loss) << dtype_name(amp);
    EXPECT_GT(history[1].test_acc, 0.5) << dtype_name(amp);
    losses.push_back(history[1].loss);
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-3 * losses[0]) << "bfloat16 hybridized against imperative";
}

}  // namespace
}  // namespace kiln
