// Winograd convolution (backends/cpu/conv_winograd.h) against a float64
// reference: the kernel itself on every padding, odd and even sizes, tiny
// images, channel counts that are not multiples of 8, both tile sizes, with
// bias, residual and ReLU, and the data gradient's transposed weights; then
// through the Convolution, _kiln_conv_act and backward-data ops, where the
// selection must route 3x3 stride-1 layers to it and the results must match
// the direct (oneDNN) convolution's.
//
// Tolerance: inputs and weights uniform in [-1, 1], so an output sums 9C
// products of magnitude <= 1; errors are measured relative to scale =
// sqrt(9C). Measured on the ResNet-18 stage shapes (64..512 channels): the
// direct oneDNN convolution 1.3e-6..2.4e-6, F(2x2) 4.5e-7..7.4e-7, F(4x4)
// 7.7e-6..1.4e-5 (its transforms multiply by up to 8 and divide by 24). The
// tests allow F(2x2) 2e-6 and F(4x4) 4e-5.
//
// The weight gradient sums batch x OH x OW products per weight; its errors are
// relative to the square root of that count. Measured on the stage shapes
// (batch 8): F(2x2) 3.0e-7..7.0e-7, F(4x4) 2.8e-6..1.0e-5; the same
// tolerances apply.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cpu/conv_winograd.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/ops/conv.h"
#include "ir/ops/fused_layers.h"
#include "runtime/engine.h"
#include "tests/frontend/winograd_mode_guard.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using cpu::WinogradConv;

double tolerance(int tile) { return tile == 4 ? 4e-5 : 2e-6; }
double weight_grad_tolerance(int tile) { return tile == 4 ? 4e-5 : 2e-6; }

using ModeGuard = test::WinogradModeGuard;

using test::uniform;

// y = act(conv(x, w) + bias + sum) in float64, weights as the kernel reads them.
std::vector<double> reference(const WinogradConv& s, const std::vector<float>& x, const std::vector<float>& w,
                              const float* bias, const float* sum, bool relu) {
  const int64_t C = s.in_channels, K = s.out_channels, OH = s.out_height, OW = s.out_width;
  std::vector<double> y(static_cast<size_t>(s.batch * K * OH * OW));
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          double acc = bias ? bias[k] : 0.0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t r = 0; r < 3; ++r)
              for (int64_t q = 0; q < 3; ++q) {
                int64_t iy = oy - s.pad_top + r, ix = ox - s.pad_left + q;
                if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
                double g = s.transposed_weight ? w[static_cast<size_t>(((c * K + k) * 3 + 2 - r) * 3 + 2 - q)]
                                               : w[static_cast<size_t>(((k * C + c) * 3 + r) * 3 + q)];
                acc += g * x[static_cast<size_t>(((n * C + c) * s.height + iy) * s.width + ix)];
              }
          size_t at = static_cast<size_t>(((n * K + k) * OH + oy) * OW + ox);
          if (sum) acc += sum[at];
          y[at] = relu ? std::max(acc, 0.0) : acc;
        }
  return y;
}

// Largest |got - want| / sqrt(9C).
double scaled_error(const std::vector<float>& got, const std::vector<double>& want, int64_t channels) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  return worst / std::sqrt(9.0 * static_cast<double>(channels));
}

WinogradConv make(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t pad) {
  return {.batch = n, .in_channels = c, .height = h, .width = w, .out_channels = k,
          .out_height = h + 2 * pad - 2, .out_width = w + 2 * pad - 2, .pad_top = pad, .pad_left = pad};
}

std::string name(const WinogradConv& s, int tile) {
  return fmt::format("F({0}x{0}) x[{1},{2},{3},{4}] k={5} out {6}x{7} pad ({8},{9}) transposed {10}", tile, s.batch,
                     s.in_channels, s.height, s.width, s.out_channels, s.out_height, s.out_width, s.pad_top,
                     s.pad_left, s.transposed_weight);
}

// Runs the kernel on `s` with tile size `tile`, checks it against the
// reference and returns the scaled error.
double check_kernel(const WinogradConv& s, int tile, bool bias, bool sum, bool relu, int threads = 2) {
  auto x = uniform(s.batch * s.in_channels * s.height * s.width, 1);
  auto w = uniform(s.out_channels * s.in_channels * 9, 2);
  auto b = uniform(s.out_channels, 3);
  auto r = uniform(s.batch * s.out_channels * s.out_height * s.out_width, 4);
  std::vector<float> y(r.size(), 12345.0f);
  if (sum) y = r;  // the residual in the output buffer, as _kiln_conv_act passes it
  engine::RunContext run{.device = Device::cpu(0), .num_threads = threads};
  cpu::winograd_conv(run, s, tile, x.data(), w.data(), bias ? b.data() : nullptr, sum ? y.data() : nullptr,
                     relu ? std::optional(ActType::kRelu) : std::nullopt, /*cache_weights=*/false, y.data());
  auto want = reference(s, x, w, bias ? b.data() : nullptr, sum ? r.data() : nullptr, relu);
  double err = scaled_error(y, want, s.in_channels);
  EXPECT_LE(err, tolerance(tile)) << name(s, tile) << " bias " << bias << " sum " << sum << " relu " << relu;
  return err;
}

TEST(ConvWinograd, KernelMatchesReferenceOnManyShapes) {
  for (int tile : {2, 4}) {
    for (int64_t pad : {0, 1, 2}) {
      for (int64_t hw : {3, 4, 5, 6, 7, 8, 9, 14, 17}) {
        if (hw + 2 * pad - 2 < 1) continue;
        check_kernel(make(2, 8, hw, hw, 8, pad), tile, true, false, false);
      }
      check_kernel(make(1, 3, 11, 6, 5, pad), tile, false, false, false);   // channels below one vector
      check_kernel(make(3, 13, 7, 10, 19, pad), tile, true, false, false);  // vector plus a remainder
    }
    // Tiny images: 1x1 .. 4x4 outputs.
    for (int64_t hw : {1, 2, 3, 4}) check_kernel(make(2, 16, hw, hw, 16, 1), tile, true, false, false);
    // Several threads over many tile rows and images, with every epilogue.
    for (bool bias : {false, true})
      for (bool sum : {false, true})
        for (bool relu : {false, true}) check_kernel(make(4, 24, 12, 13, 40, 1), tile, bias, sum, relu);
  }
}

TEST(ConvWinograd, LargePaddingAndAsymmetricOutput) {
  for (int tile : {2, 4}) {
    check_kernel(make(2, 9, 5, 5, 10, 3), tile, true, false, false);  // outputs fed by padding alone
    WinogradConv s = make(2, 9, 8, 9, 10, 1);
    s.out_height -= 1;  // pad_bottom 0
    s.out_width += 1;   // pad_right 2
    check_kernel(s, tile, true, true, true);
  }
}

TEST(ConvWinograd, TransposedWeights) {
  for (int tile : {2, 4}) {
    for (int64_t pad : {0, 1, 2}) {
      WinogradConv s = make(2, 11, 9, 8, 17, pad);
      s.transposed_weight = true;
      check_kernel(s, tile, false, false, false);
    }
  }
}

TEST(ConvWinograd, ResNetStageShapesStayAccurate) {
  // A batch slice of each ResNet-18 stage: the error must not grow with C.
  for (int tile : {2, 4}) {
    for (const WinogradConv& s : {make(2, 64, 28, 28, 64, 1), make(2, 256, 7, 7, 256, 1), make(2, 512, 4, 4, 64, 1)}) {
      double err = check_kernel(s, tile, true, false, false);
      std::printf("%s: max error %.3g x sqrt(9C)\n", name(s, tile).c_str(), err);
    }
  }
  // The direct convolution's error on the same scale, for comparison.
  for (const WinogradConv& s : {make(2, 64, 28, 28, 64, 1), make(2, 256, 7, 7, 256, 1), make(2, 512, 4, 4, 64, 1)}) {
    ModeGuard off(0);
    auto x = uniform(s.batch * s.in_channels * s.height * s.width, 1);
    auto w = uniform(s.out_channels * s.in_channels * 9, 2);
    auto b = uniform(s.out_channels, 3);
    NDArray y = nd::convolution(nd::array(x, {s.batch, s.in_channels, s.height, s.width}),
                                nd::array(w, {s.out_channels, s.in_channels, 3, 3}), nd::array(b, {s.out_channels}),
                                {.kernel = {3, 3}, .pad = {1, 1}, .num_filter = static_cast<int>(s.out_channels)});
    double err = scaled_error(y.to_vector<float>(), reference(s, x, w, b.data(), nullptr, false), s.in_channels);
    std::printf("direct x[%ld,%ld,%ld,%ld]: max error %.3g x sqrt(9C)\n", static_cast<long>(s.batch),
                static_cast<long>(s.in_channels), static_cast<long>(s.height), static_cast<long>(s.width), err);
  }
}

// dw[k][c][r][q] = sum over n, oy, ox of dy[n][k][oy][ox] x[n][c][oy - pad + r][ox - pad + q], in float64.
std::vector<double> reference_weight_grad(const WinogradConv& s, const std::vector<float>& x,
                                          const std::vector<float>& dy) {
  const int64_t C = s.in_channels, K = s.out_channels, OH = s.out_height, OW = s.out_width;
  std::vector<double> dw(static_cast<size_t>(K * C * 9), 0.0);
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t q = 0; q < 3; ++q) {
            double acc = 0;
            for (int64_t oy = 0; oy < OH; ++oy)
              for (int64_t ox = 0; ox < OW; ++ox) {
                int64_t iy = oy - s.pad_top + r, ix = ox - s.pad_left + q;
                if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
                acc += static_cast<double>(dy[static_cast<size_t>(((n * K + k) * OH + oy) * OW + ox)]) *
                       x[static_cast<size_t>(((n * C + c) * s.height + iy) * s.width + ix)];
              }
            dw[static_cast<size_t>(((k * C + c) * 3 + r) * 3 + q)] += acc;
          }
  return dw;
}

// Runs the weight gradient on `s`, checks it against the reference and
// returns the error relative to sqrt(products summed) = sqrt(batch OH OW),
// the scale of a sum of that many products of magnitude <= 1.
double check_weight_grad(const WinogradConv& s, int tile, int threads = 2) {
  auto x = uniform(s.batch * s.in_channels * s.height * s.width, 11);
  auto dy = uniform(s.batch * s.out_channels * s.out_height * s.out_width, 12);
  std::vector<float> dw(static_cast<size_t>(s.out_channels * s.in_channels * 9), 12345.0f);
  engine::RunContext run{.device = Device::cpu(0), .num_threads = threads};
  cpu::winograd_weight_grad(run, s, tile, x.data(), dy.data(), dw.data());
  auto want = reference_weight_grad(s, x, dy);
  double worst = 0;
  for (size_t i = 0; i < dw.size(); ++i) worst = std::max(worst, std::abs(dw[i] - want[i]));
  double err = worst / std::sqrt(static_cast<double>(s.batch * s.out_height * s.out_width));
  EXPECT_LE(err, weight_grad_tolerance(tile)) << "weight gradient " << name(s, tile) << " threads " << threads;
  return err;
}

TEST(ConvWinograd, WeightGradientMatchesReferenceOnManyShapes) {
  for (int tile : {2, 4}) {
    for (int64_t pad : {0, 1, 2}) {
      for (int64_t hw : {3, 4, 5, 6, 7, 9, 14, 17}) {
        if (hw + 2 * pad - 2 < 1) continue;
        check_weight_grad(make(2, 8, hw, hw, 8, pad), tile);
      }
      check_weight_grad(make(1, 3, 11, 6, 5, pad), tile);   // channels below one vector
      check_weight_grad(make(3, 13, 7, 10, 19, pad), tile);  // vector plus a remainder; uneven shares
    }
    for (int64_t hw : {1, 2, 3, 4}) check_weight_grad(make(2, 16, hw, hw, 16, 1), tile);
    check_weight_grad(make(2, 9, 5, 5, 10, 3), tile);  // outputs fed by padding alone
    WinogradConv s = make(2, 9, 8, 9, 10, 1);
    s.out_height -= 1;  // pad_bottom 0
    s.out_width += 1;   // pad_right 2
    check_weight_grad(s, tile);
    // One image over two threads (the threads share each step), and one thread.
    check_weight_grad(make(1, 24, 12, 13, 40, 1), tile, 2);
    check_weight_grad(make(4, 24, 12, 13, 40, 1), tile, 1);
    // Few channels on large images: each thread sums its share of the batch
    // into its own dU (dU under 1/16 of a share), evenly and unevenly split.
    check_weight_grad(make(8, 8, 28, 28, 8, 1), tile, 2);
    check_weight_grad(make(5, 8, 28, 28, 16, 1), tile, 2);
  }
}

TEST(ConvWinograd, WeightGradientOnResNetStageShapesStaysAccurate) {
  for (int tile : {2, 4}) {
    for (const WinogradConv& s : {make(8, 64, 28, 28, 64, 1), make(8, 256, 7, 7, 256, 1), make(8, 512, 4, 4, 64, 1)}) {
      double err = check_weight_grad(s, tile);
      std::printf("weight gradient %s: max error %.3g x sqrt(N OH OW)\n", name(s, tile).c_str(), err);
    }
  }
}

TEST(ConvWinograd, SelectionTakesLargeThreeByThreeStrideOneLayers) {
  ModeGuard guard(4);
  EXPECT_EQ(cpu::winograd_tile(make(256, 64, 28, 28, 64, 1)), 4);
  EXPECT_EQ(cpu::winograd_tile(make(256, 512, 4, 4, 512, 1)), 4);
  EXPECT_EQ(cpu::winograd_tile(make(256, 3, 28, 28, 64, 1)), 0);   // too few input channels
  EXPECT_EQ(cpu::winograd_tile(make(256, 64, 28, 28, 8, 1)), 0);   // too few output channels
  EXPECT_EQ(cpu::winograd_tile(make(256, 64, 1, 1, 64, 1)), 0);    // one output: 16 products for 9
  cpu::winograd_set_mode(2);
  EXPECT_EQ(cpu::winograd_tile(make(256, 64, 28, 28, 64, 1)), 2);
  cpu::winograd_set_mode(0);
  EXPECT_EQ(cpu::winograd_tile(make(256, 64, 28, 28, 64, 1)), 0);
  EXPECT_THROW(cpu::winograd_set_mode(3), ValueError);
}

// ---- through the ops: Winograd on and off must agree

NDArray array(const Shape& shape, uint64_t seed) {
  auto v = uniform(shape.size(), seed);
  return nd::array(v, shape);
}

// Largest |a - b| / sqrt(products): the scale of a sum of that many products of magnitude <= 1.
double max_scaled_difference_over(const NDArray& a, const NDArray& b, double products) {
  auto x = a.to_vector<float>(), y = b.to_vector<float>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
  return worst / std::sqrt(products);
}

// An output of a convolution over `channels` input channels sums 9 x channels products.
double max_scaled_difference(const NDArray& a, const NDArray& b, int64_t channels) {
  return max_scaled_difference_over(a, b, 9.0 * static_cast<double>(channels));
}

TEST(ConvWinograd, ConvolutionOpsMatchTheDirectConvolution) {
  struct Case {
    Shape data;
    int filters;
    int64_t pad;
  };
  const Case cases[] = {{{3, 32, 14, 14}, 32, 1}, {{2, 24, 9, 7}, 40, 0}, {{2, 16, 5, 6}, 20, 2}, {{5, 64, 4, 4}, 48, 1}};
  for (int mode : {2, 4}) {
    for (const Case& c : cases) {
      const std::string what = fmt::format("mode {} data {} filters {} pad {}", mode, c.data, c.filters, c.pad);
      ConvActAttrs a;
      a.kernel = Shape{3, 3};
      a.pad = Shape{c.pad, c.pad};
      a.num_filter = c.filters;
      a.act_type = ActType::kRelu;
      a.with_sum = true;
      const auto& conv_attrs = static_cast<const ConvolutionAttrs&>(a);
      NDArray x = array(c.data, 5), w = array({c.filters, c.data[1], 3, 3}, 6), b = array({c.filters}, 7);
      NDArray y0, r, fused0, dx0, dw0;
      ConvolutionBackwardDataAttrs bd;
      static_cast<ConvolutionAttrs&>(bd) = conv_attrs;
      bd.data_shape = x.shape();
      {
        ModeGuard off(0);
        y0 = invoke1(OpId::kConvolution, {x, w, b}, OpAttrs::make(conv_attrs));
        r = array(y0.shape(), 8);
        fused0 = invoke1(OpId::kConvAct, {x, w, b, r}, OpAttrs::make(a));
        dx0 = invoke1(OpId::kConvolutionBackwardData, {r, w}, OpAttrs::make(bd));
        dw0 = invoke1(OpId::kConvolutionBackwardWeight, {r, x}, OpAttrs::make(conv_attrs));
        y0.wait_to_read(), fused0.wait_to_read(), dx0.wait_to_read(), dw0.wait_to_read();
      }
      ModeGuard on(mode);
      NDArray y1 = invoke1(OpId::kConvolution, {x, w, b}, OpAttrs::make(conv_attrs));
      NDArray fused1 = invoke1(OpId::kConvAct, {x, w, b, r}, OpAttrs::make(a));
      NDArray dx1 = invoke1(OpId::kConvolutionBackwardData, {r, w}, OpAttrs::make(bd));
      NDArray dw1 = invoke1(OpId::kConvolutionBackwardWeight, {r, x}, OpAttrs::make(conv_attrs));
      const double tol = 2 * tolerance(mode);
      // A weight's gradient sums N x OH x OW products.
      const double dw_products = static_cast<double>(r.shape().size() / r.shape()[1]);
      EXPECT_LE(max_scaled_difference_over(dw0, dw1, dw_products), 2 * weight_grad_tolerance(mode))
          << "backward weight " << what;
      EXPECT_GT(max_scaled_difference_over(dw0, dw1, dw_products), 0)
          << "backward weight did not take Winograd: " << what;
      EXPECT_LE(max_scaled_difference(y0, y1, c.data[1]), tol) << "Convolution " << what;
      EXPECT_LE(max_scaled_difference(fused0, fused1, c.data[1]), tol) << "_kiln_conv_act " << what;
      EXPECT_LE(max_scaled_difference(dx0, dx1, c.filters), tol) << "backward data " << what;
      // Winograd rounds differently: equal bits would mean it did not run.
      EXPECT_GT(max_scaled_difference(y0, y1, c.data[1]), 0) << "Convolution did not take Winograd: " << what;
      EXPECT_GT(max_scaled_difference(fused0, fused1, c.data[1]), 0) << "_kiln_conv_act did not take Winograd: " << what;
      EXPECT_GT(max_scaled_difference(dx0, dx1, c.filters), 0) << "backward data did not take Winograd: " << what;
    }
  }
}

}  // namespace
}  // namespace kiln
