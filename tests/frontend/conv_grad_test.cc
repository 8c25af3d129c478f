// Gradients of Convolution, Pooling and BatchNorm through autograd against
// central differences (tests/frontend/grad_check.h).
//
// oneDNN computes in float32 only, so the checks run in float32: larger steps
// (the ops are linear or smooth on the scales used) and looser tolerances, on
// small inputs. Max pooling gets distinct, well-separated values so no step
// moves a maximum.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/nd.h"
#include "runtime/engine.h"
#include "runtime/profiler.h"
#include "runtime/storage.h"
#include "tests/frontend/grad_check.h"

namespace kiln {
namespace {

using testing::check_gradients;
using testing::GradCheckOptions;

class ConvGrad : public ::testing::TestWithParam<int> {
 protected:
  Device dev() const { return Device::cpu(GetParam()); }
  NDArray normal(const Shape& s, double scale = 1) { return nd::random::normal(s, 0, scale, {.device = dev()}); }
};

// Convolution is linear in each input: the differences are exact up to float32 rounding.
const GradCheckOptions kLinear{.eps = 5e-2, .rtol = 1e-2, .atol = 1e-3};

TEST_P(ConvGrad, ConvolutionDataWeightBias) {
  nd::random::seed(21);
  ConvolutionAttrs a{.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}, .num_filter = 4, .num_group = 2};
  check_gradients(
      [&](std::span<const NDArray> x) { return nd::convolution(x[0], x[1], x[2], a); },
      {normal({1, 4, 5, 7}), normal({4, 2, 3, 3}, 0.5), normal({4})}, kLinear);
  // Dilation, no bias, batch 2, 3 channels.
  ConvolutionAttrs d{.kernel = {2, 3}, .dilate = {2, 1}, .pad = {1, 0}, .num_filter = 2};
  check_gradients([&](std::span<const NDArray> x) { return nd::convolution(x[0], x[1], NDArray(), d); },
                  {normal({2, 3, 5, 6}), normal({2, 3, 2, 3}, 0.5)}, kLinear);
}

// The first layer's data has no gradient buffer: only the weight gradient
// (and the bias sum) may run in backward.
TEST_P(ConvGrad, ConvolutionSkipsDataGradientWhenNotNeeded) {
  nd::random::seed(22);
  NDArray x = normal({2, 3, 6, 6}), w = normal({4, 3, 3, 3}), b = normal({4});
  check_gradients([&](std::span<const NDArray> in) { return nd::convolution(in[0], in[1], in[2]); }, {x, w, b},
                  {.eps = 5e-2, .rtol = 1e-2, .atol = 1e-3, .no_grad = {0}});
  w.attach_grad();
  NDArray y;
  {
    autograd::Record record;
    y = nd::sum(nd::convolution(x, w, NDArray()));
  }
  engine::wait_all();
  profiler::clear();
  profiler::start();
  autograd::backward({y});
  w.grad().wait_to_read();
  engine::wait_all();
  profiler::stop();
  bool data_grad = false, weight_grad = false;
  for (const profiler::Event& e : profiler::events()) {
    data_grad = data_grad || e.name == "_backward_Convolution_data";
    weight_grad = weight_grad || e.name == "_backward_Convolution_weight";
  }
  profiler::clear();
  EXPECT_TRUE(weight_grad);
  EXPECT_FALSE(data_grad);
}

// A shuffled ramp: distinct values 0.1 apart.
NDArray distinct_values(const Shape& s, Device dev) {
  std::vector<float> v(static_cast<size_t>(s.size()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.1f - 2.0f;
  uint64_t state = 99;
  for (size_t i = v.size(); i > 1; --i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(v[i - 1], v[(state >> 33) % i]);
  }
  return nd::array(v, s, dev);
}

TEST_P(ConvGrad, PoolingMaxAvgSum) {
  nd::random::seed(23);
  for (std::string type : {"max", "avg", "sum"})
    for (std::string convention : {"valid", "full"}) {
      SCOPED_TRACE(type + " " + convention);
      PoolingAttrs a{.kernel = {3, 3}, .pool_type = type, .pooling_convention = convention, .stride = {2, 2},
                     .pad = {1, 1}};
      check_gradients([&](std::span<const NDArray> x) { return nd::pooling(x[0], a); },
                      {distinct_values({1, 3, 5, 7}, dev())}, {.eps = 2e-2, .rtol = 1e-2, .atol = 1e-3});
    }
  PoolingAttrs excl{.kernel = {2, 2}, .pool_type = "avg", .pad = {1, 1}, .count_include_pad = false};
  check_gradients([&](std::span<const NDArray> x) { return nd::pooling(x[0], excl); },
                  {distinct_values({2, 2, 4, 5}, dev())}, {.eps = 2e-2, .rtol = 1e-2, .atol = 1e-3});
  PoolingAttrs global{.pool_type = "avg", .global_pool = true};
  check_gradients([&](std::span<const NDArray> x) { return nd::pooling(x[0], global); },
                  {distinct_values({2, 3, 4, 5}, dev())}, {.eps = 2e-2, .rtol = 1e-2, .atol = 1e-3});
}

TEST_P(ConvGrad, BatchNormTrainMode) {
  nd::random::seed(24);
  for (bool fix_gamma : {false, true}) {
    SCOPED_TRACE(fmt::format("fix_gamma={}", fix_gamma));
    BatchNormAttrs a{.eps = 1e-3, .fix_gamma = fix_gamma};
    NDArray mm = nd::zeros({3}, {.device = dev()}), mv = nd::ones({3}, {.device = dev()});
    check_gradients(
        [&](std::span<const NDArray> x) { return nd::batch_norm(x[0], x[1], x[2], x[3], x[4], a); },
        {normal({2, 3, 3, 4}), nd::random::uniform({3}, 0.5, 1.5, {.device = dev()}), normal({3}), mm, mv},
        {.eps = 1e-2, .rtol = 2e-2, .atol = 2e-3, .no_grad = {3, 4}});
  }
}

TEST_P(ConvGrad, BatchNormPredictMode) {
  nd::random::seed(25);
  BatchNormAttrs a{.fix_gamma = false};
  NDArray mm = normal({3}), mv = nd::random::uniform({3}, 0.5, 1.5, {.device = dev()});
  check_gradients([&](std::span<const NDArray> x) { return nd::batch_norm(x[0], x[1], x[2], x[3], x[4], a); },
                  {normal({2, 3, 2, 3}), normal({3}), normal({3}), mm, mv},
                  {.eps = 5e-2, .rtol = 1e-2, .atol = 1e-3, .no_grad = {3, 4}, .train_mode = false});
}

// conv -> batch norm -> avg pool: the ops compose on one tape.
TEST_P(ConvGrad, SmallConvNetEndToEnd) {
  nd::random::seed(26);
  BatchNormAttrs bn{.fix_gamma = false};
  PoolingAttrs pool{.kernel = {2, 2}, .pool_type = "avg", .stride = {2, 2}};
  NDArray mm = nd::zeros({4}, {.device = dev()}), mv = nd::ones({4}, {.device = dev()});
  check_gradients(
      [&](std::span<const NDArray> x) {
        NDArray h = nd::convolution(x[0], x[1], x[2], {.pad = {1, 1}});
        h = nd::batch_norm(h, x[3], x[4], mm, mv, bn);
        return nd::pooling(h, pool);
      },
      {normal({2, 2, 4, 4}), normal({4, 2, 3, 3}, 0.5), normal({4}), nd::random::uniform({4}, 0.5, 1.5, {.device = dev()}),
       normal({4})},
      {.eps = 1e-2, .rtol = 2e-2, .atol = 2e-3});
}

// The tape keeps what BatchNorm's gradient reads (data, gamma, mean, var),
// not its activation-sized output: once the caller drops that output, its
// storage goes back to the pool before backward runs. Kept, it cost ResNet-18
// one activation per BatchNorm until backward.
TEST_P(ConvGrad, BatchNormDoesNotKeepItsOutputForBackward) {
  nd::random::seed(27);
  NDArray x = normal({8, 16, 32, 32}), gamma = normal({16}), beta = normal({16});
  NDArray mm = nd::zeros({16}, {.device = dev()}), mv = nd::ones({16}, {.device = dev()});
  x.attach_grad();
  gamma.attach_grad();
  storage::Pool& pool = storage::pool(dev());
  NDArray loss;
  int64_t with_y = 0, without_y = 0;
  {
    autograd::Record record;
    NDArray y = nd::batch_norm(x, gamma, beta, mm, mv, {.fix_gamma = false});
    loss = nd::sum(nd::relu(y));  // relu keeps its own output, not y
    engine::wait_all();
    with_y = pool.stats().in_use;
  }
  engine::wait_all();
  without_y = pool.stats().in_use;
  const int64_t y_bytes = x.size() * static_cast<int64_t>(sizeof(float));
  EXPECT_LE(without_y, with_y - y_bytes) << "the BatchNorm output's storage is still held";
  autograd::backward({loss});
  // The gradient is unchanged: against the same computation with y kept alive by the caller.
  NDArray dx = x.grad().copy(), dgamma = gamma.grad().copy();
  NDArray y2, z2;
  {
    autograd::Record record;
    y2 = nd::batch_norm(x, gamma, beta, mm, mv, {.fix_gamma = false});
    z2 = nd::sum(nd::relu(y2));
  }
  autograd::backward({z2});
  EXPECT_EQ(dx.to_vector<float>(), x.grad().to_vector<float>());
  EXPECT_EQ(dgamma.to_vector<float>(), gamma.grad().to_vector<float>());
}

INSTANTIATE_TEST_SUITE_P(Devices, ConvGrad, ::testing::Values(0, 1),
                         [](const auto& info) { return fmt::format("cpu{}", info.param); });

}  // namespace
}  // namespace kiln
