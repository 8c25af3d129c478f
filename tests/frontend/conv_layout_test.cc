// Channel-last Convolution and Pooling (layout NWC/NHWC/NDHWC, weights
// [F, k..., C / groups]) against their channel-first forms on transposed
// arrays: forward, data/weight/bias gradients, 16-bit data, bad layouts.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "frontend/amp.h"
#include "frontend/autograd.h"
#include "frontend/cached_op.h"
#include "frontend/invoke.h"
#include "frontend/kiln.h"
#include "frontend/nd.h"
#include "ir/ops/conv.h"

namespace kiln {
namespace {

// Channel-first axes -> channel-last (data and weights alike: [A, C, s...] -> [A, s..., C]).
IntTuple to_last(int ndim) {
  IntTuple p{0};
  for (int i = 2; i < ndim; ++i) p.push_back(i);
  p.push_back(1);
  return p;
}

IntTuple to_first(int ndim) {
  IntTuple p{0, ndim - 1};
  for (int i = 1; i < ndim - 1; ++i) p.push_back(i);
  return p;
}

void expect_close(const NDArray& got, const NDArray& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], tol * std::max(1.0, scale)) << what << " at " << i;
}

struct LayoutCase {
  Shape x;  // channel-first data
  int filters, groups;
  Shape kernel, stride, pad, dilate;
  std::string layout;  // the channel-last name
};

void PrintTo(const LayoutCase& k, std::ostream* os) {
  *os << fmt::format("{} x{} filters {} groups {} kernel {}", k.layout, k.x, k.filters, k.groups, k.kernel);
}

void backward(const NDArray& head, const NDArray& grad) {
  std::vector<NDArray> heads{head}, grads{grad};
  autograd::backward(heads, grads);
}

class ConvLayout : public ::testing::TestWithParam<LayoutCase> {};

// Forward and all three gradients equal the channel-first op's, transposed.
TEST_P(ConvLayout, MatchesChannelFirstOnTransposedArrays) {
  const LayoutCase& k = GetParam();
  nd::random::seed(5);
  const int nd_ = k.x.ndim();
  Shape wshape{k.filters, k.x[1] / k.groups};
  for (int i = 0; i < k.kernel.ndim(); ++i) wshape.push_back(k.kernel[i]);
  NDArray x = nd::random::normal(k.x), w = nd::random::normal(wshape), b = nd::random::normal({k.filters});
  ConvolutionAttrs first{.kernel = k.kernel, .stride = k.stride, .dilate = k.dilate, .pad = k.pad,
                         .num_filter = k.filters, .num_group = k.groups};
  ConvolutionAttrs last = first;
  last.layout = k.layout;

  NDArray xl = nd::transpose(x, to_last(nd_)).copy(), wl = nd::transpose(w, to_last(nd_)).copy(), bl = b.copy();
  for (NDArray* a : {&x, &w, &b, &xl, &wl, &bl}) a->attach_grad();
  NDArray y, yl;
  {
    autograd::Record record;
    y = nd::convolution(x, w, b, first);
    yl = nd::convolution(xl, wl, bl, last);
  }
  NDArray dy = nd::random::normal(y.shape());
  backward(y, dy);
  backward(yl, nd::transpose(dy, to_last(nd_)).copy());
  const std::string what = fmt::format("{} x{} {}", k.layout, k.x, k.kernel);
  expect_close(nd::transpose(yl, to_first(nd_)), y, 1e-5, what + " forward");
  expect_close(nd::transpose(xl.grad(), to_first(nd_)), x.grad(), 1e-5, what + " data gradient");
  expect_close(nd::transpose(wl.grad(), to_first(nd_)), w.grad(), 1e-5, what + " weight gradient");
  expect_close(bl.grad(), b.grad(), 1e-5, what + " bias gradient");

  // 16-bit data: the same values (both layouts round once from float32 accumulation).
  for (DType t : {DType::kBfloat16, DType::kFloat16}) {
    NDArray y16 = nd::convolution(x.astype(t), w.astype(t), b.astype(t), first);
    NDArray yl16 = nd::convolution(xl.astype(t), wl.astype(t), bl.astype(t), last);
    expect_close(nd::transpose(yl16, to_first(nd_)).astype(DType::kFloat32), y16.astype(DType::kFloat32),
                 t == DType::kBfloat16 ? 2e-2 : 2e-3, what + " " + std::string(dtype_name(t)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConvLayout,
    ::testing::Values(LayoutCase{{2, 16, 9, 7}, 32, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, "NHWC"},
                      LayoutCase{{3, 8, 10, 10}, 12, 1, {3, 3}, {2, 2}, {1, 1}, {1, 1}, "NHWC"},
                      LayoutCase{{2, 8, 11, 9}, 16, 4, {3, 2}, {1, 2}, {1, 0}, {2, 1}, "NHWC"},
                      LayoutCase{{2, 5, 6, 6}, 7, 1, {1, 1}, {1, 1}, {0, 0}, {1, 1}, "NHWC"},
                      LayoutCase{{2, 6, 13}, 8, 2, {3}, {2}, {1}, {1}, "NWC"},
                      LayoutCase{{1, 4, 5, 6, 7}, 6, 1, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, "NDHWC"}));

struct PoolLayoutCase {
  Shape x;
  PoolingAttrs attrs;
  std::string layout;
};

void PrintTo(const PoolLayoutCase& k, std::ostream* os) {
  *os << fmt::format("{} {} x{}{}", k.layout, k.attrs.pool_type, k.x, k.attrs.global_pool ? " global" : "");
}

class PoolLayout : public ::testing::TestWithParam<PoolLayoutCase> {};

TEST_P(PoolLayout, MatchesChannelFirstOnTransposedArrays) {
  const PoolLayoutCase& k = GetParam();
  nd::random::seed(6);
  const int nd_ = k.x.ndim();
  NDArray x = nd::random::normal(k.x);
  NDArray xl = nd::transpose(x, to_last(nd_)).copy();
  PoolingAttrs last = k.attrs;
  last.layout = k.layout;
  x.attach_grad();
  xl.attach_grad();
  NDArray y, yl;
  {
    autograd::Record record;
    y = nd::pooling(x, k.attrs);
    yl = nd::pooling(xl, last);
  }
  NDArray dy = nd::random::normal(y.shape());
  backward(y, dy);
  backward(yl, nd::transpose(dy, to_last(nd_)).copy());
  const std::string what = fmt::format("{} {} x{}", k.layout, k.attrs.pool_type, k.x);
  expect_close(nd::transpose(yl, to_first(nd_)), y, 1e-6, what + " forward");
  expect_close(nd::transpose(xl.grad(), to_first(nd_)), x.grad(), 1e-6, what + " gradient");
  for (DType t : {DType::kBfloat16, DType::kFloat16}) {
    NDArray y16 = nd::pooling(x.astype(t), k.attrs);
    NDArray yl16 = nd::pooling(xl.astype(t), last);
    expect_close(nd::transpose(yl16, to_first(nd_)).astype(DType::kFloat32), y16.astype(DType::kFloat32), 1e-2,
                 what + " " + std::string(dtype_name(t)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PoolLayout,
    ::testing::Values(
        PoolLayoutCase{{2, 16, 9, 9}, {.kernel = {3, 3}, .pool_type = "max", .stride = {2, 2}, .pad = {1, 1}}, "NHWC"},
        PoolLayoutCase{{2, 5, 8, 6}, {.kernel = {2, 2}, .pool_type = "avg", .stride = {2, 2}}, "NHWC"},
        PoolLayoutCase{{2, 5, 7, 7},
                       {.kernel = {3, 3}, .pool_type = "avg", .stride = {2, 2}, .pad = {1, 1},
                        .count_include_pad = false},
                       "NHWC"},
        PoolLayoutCase{{3, 32, 4, 4}, {.pool_type = "avg", .global_pool = true}, "NHWC"},
        PoolLayoutCase{{2, 3, 10}, {.kernel = {3}, .pool_type = "max", .stride = {2}}, "NWC"}));

TEST(ConvLayoutErrors, BadLayoutsAndUnsupportedChannelLastPooling) {
  NDArray x = nd::random::normal({1, 4, 5, 5}), w = nd::random::normal({2, 4, 3, 3});
  try {
    nd::convolution(x, w, NDArray(), {.layout = "NCWH"});
    FAIL() << "a bad layout was accepted";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("NCWH"), std::string::npos) << m;
    EXPECT_NE(m.find("NCHW"), std::string::npos) << m;
    EXPECT_NE(m.find("NHWC"), std::string::npos) << m;
  }
  // A channel-last layout names 2 spatial axes: a 1-D kernel does not fit it.
  EXPECT_THROW(nd::convolution(nd::random::normal({1, 4, 5}), nd::random::normal({2, 3, 4}), NDArray(),
                               {.kernel = {3}, .layout = "NHWC"}),
               ValueError);
  // Channel-last weights are [F, k..., C]: channel-first weights do not fit.
  EXPECT_THROW(nd::convolution(nd::random::normal({1, 5, 5, 4}), w, NDArray(), {.kernel = {3, 3}, .layout = "NHWC"}),
               ShapeError);
  try {
    nd::pooling(nd::random::normal({1, 5, 5, 4}),
                {.kernel = {2, 2}, .pool_type = "sum", .stride = {2, 2}, .layout = "NHWC"})
        .wait_to_read();
    FAIL() << "channel-last sum pooling ran";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("channel-last"), std::string::npos) << e.what();
  }
}

// A compiled 16-bit CNN runs the channels-last pass exactly where the CPU has
// instructions for the type (elsewhere its convolutions are widened to
// float32, which run faster channel-first), with the same outputs either way.
TEST(ConvLayoutHybridized, ChannelsLastRunsWhereTheTypeIsNativeAndChangesNoValue) {
  for (DType t : {DType::kBfloat16, DType::kFloat16}) {
    nd::random::seed(8);
    nn::HybridSequential net;
    net.add(nn::Conv2D(16, 3, 1, 1, 1, 1, "relu"), nn::MaxPool2D(2, 2), nn::Conv2D(16, 3, 1, 1),
            nn::GlobalAvgPool2D(), nn::Flatten(), nn::Dense(4));
    net.initialize();
    NDArray x = nd::random::normal({2, 3, 8, 8});
    NDArray want;
    {
      amp::Autocast autocast(t);
      want = net(x);
    }
    net.hybridize({.amp = t});
    NDArray got = net(x);
    const std::string report = net.cached_op()->pass_report();
    EXPECT_EQ(report.find("channels-last") != std::string::npos, cpu::channels_last_pays(t))
        << dtype_name(t) << ":\n" << report;
    expect_close(got.astype(DType::kFloat32), want.astype(DType::kFloat32), t == DType::kBfloat16 ? 2e-2 : 2e-3,
                 std::string(dtype_name(t)) + " hybridized");
  }
}

}  // namespace
}  // namespace kiln
