// The channel-last bfloat16 Winograd convolution
// (backends/cpu/conv_winograd_bf16.h) against a float64 reference on the
// same bf16 inputs: every padding, odd and even sizes, tiles that overhang
// the image, several blocks and threads, bias, residual (in the output
// buffer, as _kiln_conv_act passes it) and ReLU; then through the
// Convolution and _kiln_conv_act ops, which must route channel-last bf16 3x3
// stride-1 layers to it; then what it refuses. Skipped on CPUs it does not
// run on (no AVX512-BF16, or AMX).
//
// Tolerance: inputs and weights uniform in [-1, 1], so an output sums 9C
// products of magnitude <= 1; errors are measured relative to sqrt(9C), as
// in conv_winograd_test.cc. The direct bf16 convolution's only error is the
// final rounding (about 7e-4 on this scale); the roundings of the transformed
// operands (each a sum of up to four values, rounded to 8 bits) dominate
// here: measured 5.7e-3..7.5e-3 on ResNet-18's stage shapes. The tests allow
// 1.2e-2. End to end the difference is smaller, since the inputs and weights
// already carry bf16's rounding: ResNet-18's bf16 logits are 4.5e-3 (RMS,
// relative) from float32's with Winograd, 3.2e-3 without; the test allows 2x.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/conv_winograd_bf16.h"
#include "frontend/amp.h"
#include "frontend/cached_op.h"
#include "frontend/invoke.h"
#include "frontend/kiln.h"
#include "frontend/nd.h"
#include "ir/ops/conv.h"
#include "ir/ops/fused_layers.h"
#include "models/zoo.h"
#include "runtime/engine.h"
#include "tests/frontend/winograd_mode_guard.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using cpu::WinogradConv;

constexpr double kTolerance = 1.2e-2;

using ModeGuard = test::WinogradModeGuard;

std::vector<BFloat16> bf16_uniform(int64_t n, uint64_t seed) {
  std::vector<BFloat16> out;
  for (float v : test::uniform(n, seed)) out.push_back(float_to_bf16(v));
  return out;
}

double value(BFloat16 b) { return bf16_to_float(b); }

// Channel-last reference in float64: y = relu?(conv(x, w) + bias + sum).
std::vector<double> reference(const WinogradConv& s, const std::vector<BFloat16>& x, const std::vector<BFloat16>& w,
                              const BFloat16* bias, const BFloat16* sum, bool relu) {
  const int64_t C = s.in_channels, K = s.out_channels, OH = s.out_height, OW = s.out_width;
  std::vector<double> y(static_cast<size_t>(s.batch * OH * OW * K));
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t oy = 0; oy < OH; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox)
        for (int64_t k = 0; k < K; ++k) {
          double acc = bias ? value(bias[k]) : 0.0;
          for (int64_t r = 0; r < 3; ++r)
            for (int64_t q = 0; q < 3; ++q) {
              const int64_t iy = oy - s.pad_top + r, ix = ox - s.pad_left + q;
              if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
              const BFloat16* xp = &x[static_cast<size_t>(((n * s.height + iy) * s.width + ix) * C)];
              const BFloat16* wp = &w[static_cast<size_t>(((k * 3 + r) * 3 + q) * C)];
              for (int64_t c = 0; c < C; ++c) acc += value(wp[c]) * value(xp[c]);
            }
          const size_t at = static_cast<size_t>(((n * OH + oy) * OW + ox) * K + k);
          if (sum) acc += value(sum[at]);
          y[at] = relu ? std::max(acc, 0.0) : acc;
        }
  return y;
}

WinogradConv make(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t pad) {
  return {.batch = n, .in_channels = c, .height = h, .width = w, .out_channels = k,
          .out_height = h + 2 * pad - 2, .out_width = w + 2 * pad - 2, .pad_top = pad, .pad_left = pad};
}

std::string name(const WinogradConv& s) {
  return fmt::format("x[{},{},{},{}] k={} out {}x{} pad ({},{})", s.batch, s.height, s.width, s.in_channels,
                     s.out_channels, s.out_height, s.out_width, s.pad_top, s.pad_left);
}

// [n][plane][channels] -> [n][channels][plane], or back.
std::vector<BFloat16> transpose_images(const std::vector<BFloat16>& a, int64_t n, int64_t plane, int64_t channels,
                                       bool to_first) {
  std::vector<BFloat16> out(a.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = 0; q < plane; ++q)
      for (int64_t c = 0; c < channels; ++c) {
        const size_t last = static_cast<size_t>((i * plane + q) * channels + c);
        const size_t first = static_cast<size_t>((i * channels + c) * plane + q);
        if (to_first) out[first] = a[last];
        else out[last] = a[first];
      }
  return out;
}

// The problem's kernel as [K][3][3][C] (what the reference reads) from the
// array the kernel is given: channel-last OHWI or channel-first OIHW, and with
// s.transposed_weight the forward convolution's weights (its output channels
// are the problem's input channels), rotated.
std::vector<BFloat16> logical_weights(const WinogradConv& s, const std::vector<BFloat16>& w, bool channels_last) {
  const int64_t C = s.in_channels, K = s.out_channels;
  std::vector<BFloat16> out(w.size());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          // (output, input, row, column) of the array's own convolution
          const int64_t o = s.transposed_weight ? c : k, in = s.transposed_weight ? k : c;
          const int64_t r = s.transposed_weight ? 2 - i : i, q = s.transposed_weight ? 2 - j : j;
          const int64_t in_count = s.transposed_weight ? K : C;
          const int64_t at = channels_last ? ((o * 3 + r) * 3 + q) * in_count + in : ((o * in_count + in) * 3 + r) * 3 + q;
          out[static_cast<size_t>(((k * 3 + i) * 3 + j) * C + c)] = w[static_cast<size_t>(at)];
        }
  return out;
}

// Runs the kernel on `s` in the given layout, checks it against the
// reference and returns the largest error over sqrt(9C).
double check_kernel(const WinogradConv& s, bool bias, bool sum, bool relu, int threads = 2, bool channels_last = true) {
  const int64_t in_plane = s.height * s.width, out_plane = s.out_height * s.out_width;
  auto x = bf16_uniform(s.batch * in_plane * s.in_channels, 1);  // channel-last
  auto w = bf16_uniform(s.out_channels * 9 * s.in_channels, 2);  // as the kernel reads it
  auto b = bf16_uniform(s.out_channels, 3);
  auto r = bf16_uniform(s.batch * out_plane * s.out_channels, 4);  // channel-last
  std::vector<BFloat16> y(r.size(), float_to_bf16(12345.0f));
  if (sum) y = channels_last ? r : transpose_images(r, s.batch, out_plane, s.out_channels, true);
  const std::vector<BFloat16> xk = channels_last ? x : transpose_images(x, s.batch, in_plane, s.in_channels, true);
  engine::RunContext run{.device = Device::cpu(0), .num_threads = threads};
  cpu::winograd_conv_bf16(run, s, channels_last, xk.data(), w.data(), bias ? b.data() : nullptr,
                          sum ? y.data() : nullptr, relu, /*cache_weights=*/false, y.data());
  if (!channels_last) y = transpose_images(y, s.batch, out_plane, s.out_channels, false);
  auto want = reference(s, x, logical_weights(s, w, channels_last), bias ? b.data() : nullptr,
                        sum ? r.data() : nullptr, relu);
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(value(y[i]) - want[i]));
  const double err = worst / std::sqrt(9.0 * static_cast<double>(s.in_channels));
  EXPECT_LE(err, kTolerance) << name(s) << (channels_last ? " channel-last" : " channel-first") << " transposed "
                             << s.transposed_weight << " bias " << bias << " sum " << sum << " relu " << relu;
  return err;
}

#define SKIP_UNLESS_SUPPORTED()                                                                 \
  if (!cpu::winograd_bf16_cpu()) GTEST_SKIP() << "this CPU does not run the bf16 Winograd kernel"

TEST(ConvWinogradBf16, KernelMatchesReferenceOnManyShapes) {
  SKIP_UNLESS_SUPPORTED();
  for (int64_t pad : {0, 1, 2})
    for (int64_t hw : {3, 4, 5, 7, 8, 9}) check_kernel(make(2, 64, hw, hw, 64, pad), true, false, false);
  check_kernel(make(1, 64, 11, 6, 128, 1), false, false, false);  // rectangular, two output-channel blocks
  check_kernel(make(3, 128, 5, 9, 64, 1), true, false, false);    // two input-channel blocks
  for (bool bias : {false, true})
    for (bool sum : {false, true})
      for (bool relu : {false, true}) check_kernel(make(4, 64, 12, 13, 64, 1), bias, sum, relu);
  // Many blocks shared by two threads, and the same on one thread.
  check_kernel(make(9, 64, 14, 14, 64, 1), true, true, true, 2);
  check_kernel(make(9, 64, 14, 14, 64, 1), true, true, true, 1);
}

// Channel-first arrays (groups of images transposed in per-thread buffers)
// and the data gradient's transposed, rotated weights, in both layouts.
TEST(ConvWinogradBf16, ChannelFirstAndTransposedWeights) {
  SKIP_UNLESS_SUPPORTED();
  for (bool channels_last : {false, true})
    for (bool transposed : {false, true}) {
      for (int64_t pad : {0, 1, 2}) {
        WinogradConv s = make(3, 64, 7, 6, 128, pad);
        s.transposed_weight = transposed;
        check_kernel(s, !transposed, false, false, 2, channels_last);
      }
      // Groups of several small images, a last group of fewer; one image of many blocks.
      for (WinogradConv s : {make(7, 128, 4, 4, 64, 1), make(1, 64, 28, 28, 64, 1)}) {
        s.transposed_weight = transposed;
        check_kernel(s, true, !transposed, !transposed, 2, channels_last);
      }
    }
}

// The weight gradient against float64: dw[k][i][j][c] = Σ dy[n][oy][ox][k]
// x[n][oy - pad + i][ox - pad + j][c], errors over sqrt(N OH OW) (a sum of
// that many products of magnitude <= 1). Returns that error.
double check_weight_grad(const WinogradConv& s, bool channels_last) {
  const int64_t C = s.in_channels, K = s.out_channels, OH = s.out_height, OW = s.out_width;
  const int64_t in_plane = s.height * s.width, out_plane = OH * OW;
  auto x = bf16_uniform(s.batch * in_plane * C, 11);  // channel-last
  auto dy = bf16_uniform(s.batch * out_plane * K, 12);
  std::vector<BFloat16> dw(static_cast<size_t>(K * 9 * C));
  engine::RunContext run{.device = Device::cpu(0), .num_threads = 2};
  const auto xk = channels_last ? x : transpose_images(x, s.batch, in_plane, C, true);
  const auto dyk = channels_last ? dy : transpose_images(dy, s.batch, out_plane, K, true);
  cpu::winograd_weight_grad_bf16(run, s, channels_last, xk.data(), dyk.data(), dw.data());
  const auto got = logical_weights(s, dw, channels_last);  // [K][3][3][C]
  double worst = 0;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t c = 0; c < C; ++c) {
          double want = 0;
          for (int64_t n = 0; n < s.batch; ++n)
            for (int64_t oy = 0; oy < OH; ++oy)
              for (int64_t ox = 0; ox < OW; ++ox) {
                const int64_t iy = oy - s.pad_top + i, ix = ox - s.pad_left + j;
                if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
                want += value(dy[static_cast<size_t>(((n * OH + oy) * OW + ox) * K + k)]) *
                        value(x[static_cast<size_t>(((n * s.height + iy) * s.width + ix) * C + c)]);
              }
          worst = std::max(worst, std::abs(value(got[static_cast<size_t>(((k * 3 + i) * 3 + j) * C + c)]) - want));
        }
  const double err = worst / std::sqrt(static_cast<double>(s.batch * out_plane));
  EXPECT_LE(err, kTolerance) << "weight gradient " << name(s) << (channels_last ? " channel-last" : " channel-first");
  return err;
}

TEST(ConvWinogradBf16, WeightGradientMatchesReference) {
  SKIP_UNLESS_SUPPORTED();
  for (bool channels_last : {false, true}) {
    for (int64_t pad : {0, 1, 2}) check_weight_grad(make(2, 64, 7, 6, 64, pad), channels_last);
    check_weight_grad(make(3, 128, 4, 4, 64, 1), channels_last);
    check_weight_grad(make(2, 64, 9, 9, 128, 1), channels_last);
  }
  for (auto [c, hw] : {std::pair<int64_t, int64_t>{64, 28}, {512, 4}}) {
    const double err = check_weight_grad(make(2, c, hw, hw, c, 1), false);
    std::printf("[          ] weight gradient, %ld channels %ldx%ld: error / sqrt(N OH OW) = %.2e\n",
                static_cast<long>(c), static_cast<long>(hw), static_cast<long>(hw), err);
  }
}

TEST(ConvWinogradBf16, ResNetStageShapesStayAccurate) {
  SKIP_UNLESS_SUPPORTED();
  for (auto [c, hw] : {std::pair<int64_t, int64_t>{64, 28}, {128, 14}, {256, 7}, {512, 4}}) {
    const double err = check_kernel(make(2, c, hw, hw, c, 1), true, true, true);
    std::printf("[          ] %ld channels %ldx%ld: error / sqrt(9C) = %.2e\n", static_cast<long>(c),
                static_cast<long>(hw), static_cast<long>(hw), err);
  }
}

// An infinity or NaN in the input is never lost: every output whose window
// holds it is non-finite (Winograd poisons a few more, its tiles' others).
TEST(ConvWinogradBf16, NonFiniteInputsStayNonFinite) {
  SKIP_UNLESS_SUPPORTED();
  const WinogradConv s = make(1, 64, 6, 6, 64, 1);
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto x = bf16_uniform(36 * 64, 1), w = bf16_uniform(64 * 9 * 64, 2);
    const int64_t by = 2, bx = 3, bc = 5;
    x[static_cast<size_t>((by * 6 + bx) * 64 + bc)] = float_to_bf16(bad);
    std::vector<BFloat16> y(36 * 64);
    engine::RunContext run{.device = Device::cpu(0), .num_threads = 1};
    cpu::winograd_conv_bf16(run, s, true, x.data(), w.data(), nullptr, nullptr, false, false, y.data());
    for (int64_t oy = by - 1; oy <= by + 1; ++oy)
      for (int64_t ox = bx - 1; ox <= bx + 1; ++ox)
        for (int64_t k = 0; k < 64; ++k)
          ASSERT_FALSE(std::isfinite(value(y[static_cast<size_t>((oy * 6 + ox) * 64 + k)])))
              << bad << " at output (" << oy << ", " << ox << ") channel " << k;
  }
}

TEST(ConvWinogradBf16, SelectionTakesChannelMultiplesOfSixtyFourThatPay) {
  SKIP_UNLESS_SUPPORTED();
  EXPECT_TRUE(cpu::winograd_bf16_applies(make(8, 64, 28, 28, 64, 1)));
  EXPECT_TRUE(cpu::winograd_bf16_applies(make(8, 512, 4, 4, 512, 1)));
  EXPECT_TRUE(cpu::winograd_bf16_applies(make(8, 256, 7, 7, 256, 1)));  // 7x7: 1.72x fewer products
  EXPECT_FALSE(cpu::winograd_bf16_applies(make(8, 48, 28, 28, 64, 1)));  // channels not a multiple of 64
  EXPECT_FALSE(cpu::winograd_bf16_applies(make(8, 64, 28, 28, 96, 1)));
  EXPECT_FALSE(cpu::winograd_bf16_applies(make(8, 64, 1, 1, 64, 1)));  // a 1x1 output: one tile for one output
  WinogradConv transposed = make(8, 64, 28, 28, 64, 1);
  transposed.transposed_weight = true;
  EXPECT_TRUE(cpu::winograd_bf16_applies(transposed));
  ModeGuard off(0);
  EXPECT_FALSE(cpu::winograd_bf16_applies(make(8, 64, 28, 28, 64, 1)));
}

NDArray bf16_array(const Shape& shape, uint64_t seed) {
  return nd::array(test::uniform(shape.size(), seed), shape).astype(DType::kBfloat16);
}

double max_scaled_difference(const NDArray& a, const NDArray& b, int64_t channels) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst / std::sqrt(9.0 * static_cast<double>(channels));
}

TEST(ConvWinogradBf16, ChannelLastOpsTakeItAndMatchTheDirectConvolution) {
  SKIP_UNLESS_SUPPORTED();
  ConvActAttrs a;
  a.kernel = Shape{3, 3};
  a.pad = Shape{1, 1};
  a.num_filter = 64;
  a.layout = "NHWC";
  a.act_type = ActType::kRelu;
  a.with_sum = true;
  const auto& conv_attrs = static_cast<const ConvolutionAttrs&>(a);
  NDArray x = bf16_array({4, 9, 10, 64}, 5), w = bf16_array({64, 3, 3, 64}, 6), b = bf16_array({64}, 7);
  NDArray y0, r, fused0;
  {
    ModeGuard off(0);
    y0 = invoke1(OpId::kConvolution, {x, w, b}, OpAttrs::make(conv_attrs));
    r = bf16_array(y0.shape(), 8);
    fused0 = invoke1(OpId::kConvAct, {x, w, b, r}, OpAttrs::make(a));
    y0.wait_to_read(), fused0.wait_to_read();
  }
  NDArray y1 = invoke1(OpId::kConvolution, {x, w, b}, OpAttrs::make(conv_attrs));
  NDArray fused1 = invoke1(OpId::kConvAct, {x, w, b, r}, OpAttrs::make(a));
  EXPECT_LE(max_scaled_difference(y0, y1, 64), 2 * kTolerance);
  EXPECT_LE(max_scaled_difference(fused0, fused1, 64), 2 * kTolerance);
  // Winograd rounds differently: equal bits would mean it did not run.
  EXPECT_GT(max_scaled_difference(y0, y1, 64), 0) << "Convolution did not take Winograd";
  EXPECT_GT(max_scaled_difference(fused0, fused1, 64), 0) << "_kiln_conv_act did not take Winograd";
}

// Relative RMS difference of a from b (b the float32 reference).
double relative_rms(const NDArray& a, const NDArray& b) {
  std::vector<double> x = a.astype(DType::kFloat32).to_vector<double>(), y = b.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) num += (x[i] - y[i]) * (x[i] - y[i]), den += y[i] * y[i];
  return std::sqrt(num / den);
}

// End to end: d2l's ResNet-18 compiled in bf16 (channel-last, so its 3x3
// layers take Winograd) stays about as close to float32 as with the direct
// convolutions.
TEST(ConvWinogradBf16, ResNet18LogitsStayCloseToFloat32) {
  SKIP_UNLESS_SUPPORTED();
  nd::random::seed(3);
  auto net = models::resnet18(10);
  net.initialize();
  NDArray x = nd::random::normal({8, 1, 28, 28});
  NDArray want = net(x);
  net.hybridize({.amp = DType::kBfloat16});
  NDArray direct, winograd;
  {
    ModeGuard off(0);
    direct = net(x);
    direct.wait_to_read();
  }
  winograd = net(x);
  const double e_direct = relative_rms(direct, want), e_winograd = relative_rms(winograd, want);
  std::printf("[          ] bf16 logits, relative RMS error against float32: direct %.2e, Winograd %.2e\n",
              e_direct, e_winograd);
  EXPECT_LE(e_winograd, 2 * e_direct);
  EXPECT_NE(e_winograd, e_direct) << "Winograd did not run";
}

}  // namespace
}  // namespace kiln
