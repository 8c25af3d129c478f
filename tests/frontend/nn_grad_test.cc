// Gradients of the nn ops (their GradFns through eager autograd) against
// central finite differences in float64, on cpu(0) and cpu(1).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "runtime/engine.h"
#include "runtime/storage.h"
#include "tests/frontend/grad_check.h"

namespace kiln {
namespace {

using testing::check_gradients;
using testing::GradCheckOptions;

class NNGrad : public ::testing::TestWithParam<int> {
 protected:
  Device dev() const { return Device::cpu(GetParam()); }
  // float64 values in [lo, hi] whose magnitude is at least `gap` (away from kinks at 0).
  NDArray values(const Shape& s, double lo, double hi, uint32_t seed = 1, double gap = 0) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<double> v(static_cast<size_t>(s.size()));
    for (double& x : v) {
      do x = dist(gen);
      while (std::abs(x) < gap);
    }
    return nd::array(v, s, dev());
  }
  NDArray labels(const std::vector<double>& v) { return nd::array(v, Shape{static_cast<int64_t>(v.size())}, dev()); }
};

TEST_P(NNGrad, FullyConnected) {
  for (bool flatten : {true, false}) {
    NDArray x = flatten ? values({3, 2, 2}, -1, 1, 1) : values({2, 3, 4}, -1, 1, 1);
    NDArray w = values({5, 4}, -1, 1, 2), b = values({5}, -1, 1, 3);
    SCOPED_TRACE(fmt::format("flatten={}", flatten));
    check_gradients([&](std::span<const NDArray> in) { return nd::fully_connected(in[0], in[1], in[2], 5, flatten); },
                    {x, w, b});
    check_gradients([&](std::span<const NDArray> in) { return nd::fully_connected(in[0], in[1], {}, 5, flatten); },
                    {x, w});
  }
  // Only some inputs need a gradient.
  NDArray x = values({3, 4}, -1, 1, 4), w = values({2, 4}, -1, 1, 5), b = values({2}, -1, 1, 6);
  check_gradients([](std::span<const NDArray> in) { return nd::fully_connected(in[0], in[1], in[2], 2); }, {x, w, b},
                  {.no_grad = {0, 2}});
}

TEST_P(NNGrad, EveryActivation) {
  for (ActType a : {ActType::kRelu, ActType::kSigmoid, ActType::kTanh, ActType::kSoftrelu, ActType::kSoftsign}) {
    SCOPED_TRACE(print_attr(a));
    check_gradients([a](std::span<const NDArray> in) { return nd::activation(in[0], a); },
                    {values({4, 5}, -4, 4, 7, 0.05)});
  }
}

TEST_P(NNGrad, EveryLeakyReLU) {
  for (LeakyType a : {LeakyType::kLeaky, LeakyType::kElu, LeakyType::kSelu, LeakyType::kGelu}) {
    SCOPED_TRACE(print_attr(a));
    check_gradients([a](std::span<const NDArray> in) { return nd::leaky_relu(in[0], a, 0.3); },
                    {values({4, 5}, -3, 3, 8, 0.05)});
  }
}

TEST_P(NNGrad, DropoutGradientIsTheMask) {
  // A fixed (seed, offset) gives the same mask at every evaluation.
  for (IntTuple axes : {IntTuple{}, IntTuple{1}}) {
    auto fn = [axes](std::span<const NDArray> in) {
      return invoke(OpId::kDropout, in, OpAttrs::make(DropoutAttrs{.p = 0.4, .axes = axes, .seed = 5, .offset = 3}))[0];
    };
    check_gradients(fn, {values({6, 7}, -1, 1, 9)});
  }
  // Directly: d(sum(dropout(x)))/dx = mask, in train mode.
  NDArray x = values({100, 50}, -1, 1, 10);
  x.attach_grad();
  std::vector<NDArray> outs;
  {
    autograd::Record record;
    outs = invoke(OpId::kDropout, {x}, OpAttrs::make(DropoutAttrs{.p = 0.3, .seed = 2}));
  }
  autograd::backward({outs[0]});
  EXPECT_EQ(x.grad().to_vector<double>(), outs[1].to_vector<double>());
  // In predict mode the gradient is one.
  NDArray z = values({10}, -1, 1, 11);
  z.attach_grad();
  NDArray y;
  {
    autograd::Record record(false);
    y = nd::dropout(z, 0.5);
  }
  autograd::backward({y});
  EXPECT_EQ(z.grad().to_vector<double>(), std::vector<double>(10, 1.0));
}

// The tape keeps Dropout's mask, not its output: once the caller drops the
// output, its storage goes back to the pool before backward.
TEST_P(NNGrad, DropoutDoesNotKeepItsOutputForBackward) {
  NDArray x = values({64, 4096}, -1, 1, 12);
  x.attach_grad();
  storage::Pool& pool = storage::pool(dev());
  NDArray loss;
  int64_t with_y = 0, without_y = 0;
  {
    autograd::Record record;
    NDArray y = nd::dropout(x, 0.5);
    loss = nd::sum(nd::relu(y));  // relu keeps its own output, not y
    engine::wait_all();
    with_y = pool.stats().in_use;
  }
  engine::wait_all();
  without_y = pool.stats().in_use;
  EXPECT_LE(without_y, with_y - x.size() * static_cast<int64_t>(sizeof(double)))
      << "the Dropout output's storage is still held";
  autograd::backward({loss});
  EXPECT_EQ(x.grad().shape(), x.shape());
}

TEST_P(NNGrad, Flatten) {
  check_gradients([](std::span<const NDArray> in) { return nd::flatten(in[0]); }, {values({2, 3, 2}, -1, 1, 12)});
}

TEST_P(NNGrad, SoftmaxAndLogSoftmax) {
  for (int axis : {-1, 0, 1}) {
    for (std::optional<double> temp :
         {std::optional<double>{}, std::optional<double>{0.5}, std::optional<double>{3.0}}) {
      SCOPED_TRACE(fmt::format("axis={} T={}", axis, temp.value_or(1)));
      NDArray x = values({3, 4, 2}, -2, 2, 13);
      check_gradients([&](std::span<const NDArray> in) { return nd::softmax(in[0], axis, temp); }, {x});
      check_gradients([&](std::span<const NDArray> in) { return nd::log_softmax(in[0], axis, temp); }, {x});
    }
  }
}

TEST_P(NNGrad, Pick) {
  NDArray x = values({4, 5}, -1, 1, 14);
  check_gradients([](std::span<const NDArray> in) { return nd::pick(in[0], in[1], -1); }, {x, labels({0, 4, 2, 2})},
                  {.no_grad = {1}});
  check_gradients([](std::span<const NDArray> in) { return nd::pick(in[0], in[1], 0, true); },
                  {x, labels({3, 0, 1, 1, 7})}, {.no_grad = {1}});  // 7 clips to 3
  NDArray y = values({2, 3, 4}, -1, 1, 15);
  check_gradients([](std::span<const NDArray> in) { return nd::pick(in[0], in[1], 1, false, TakeMode::kWrap); },
                  {y, nd::array(std::vector<double>{0, 1, 2, -1, 4, 5, 1, 0}, Shape{2, 4}, y.device())},
                  {.no_grad = {1}});
}

TEST_P(NNGrad, SoftmaxCrossEntropy) {
  check_gradients([](std::span<const NDArray> in) { return nd::softmax_cross_entropy(in[0], in[1]); },
                  {values({5, 7}, -3, 3, 16), labels({0, 6, 3, 3, 1})}, {.no_grad = {1}});
  // int32 labels, and the same (up to sign) through log_softmax + pick.
  NDArray x = values({3, 4}, -3, 3, 17);
  NDArray l = nd::array(std::vector<int32_t>{1, 3, 0}, Shape{3}, x.device());
  check_gradients([](std::span<const NDArray> in) { return nd::softmax_cross_entropy(in[0], in[1]); }, {x, l},
                  {.no_grad = {1}});
  check_gradients([](std::span<const NDArray> in) { return nd::pick(nd::log_softmax(in[0]), in[1]); }, {x, l},
                  {.no_grad = {1}});
}

TEST_P(NNGrad, AddN) {
  check_gradients([](std::span<const NDArray> in) { return nd::add_n(in); },
                  {values({2, 3}, -1, 1, 18), values({2, 3}, -1, 1, 19), values({2, 3}, -1, 1, 20)});
  // The same array twice gets both contributions.
  check_gradients(
      [](std::span<const NDArray> in) {
        return nd::add_n({in[0], in[0], in[1]});
      },
      {values({4}, -1, 1, 21), values({4}, -1, 1, 22)});
}

TEST_P(NNGrad, SmallNetworkEndToEnd) {
  // dense -> relu -> dense -> cross-entropy: the chain a classifier trains through.
  check_gradients(
      [](std::span<const NDArray> in) {
        NDArray h = nd::activation(nd::fully_connected(in[0], in[1], in[2], 6), ActType::kTanh);
        return nd::softmax_cross_entropy(nd::fully_connected(h, in[3], in[4], 3), in[5]);
      },
      {values({4, 2, 3}, -1, 1, 23), values({6, 6}, -1, 1, 24), values({6}, -1, 1, 25), values({3, 6}, -1, 1, 26),
       values({3}, -1, 1, 27), labels({0, 2, 1, 2})},
      {.no_grad = {5}});
}

INSTANTIATE_TEST_SUITE_P(Devices, NNGrad, ::testing::Values(0, 1),
                         [](const auto& info) { return fmt::format("cpu{}", info.param); });

}  // namespace
}  // namespace kiln
