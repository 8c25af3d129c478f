// The im2col convolution (backends/cpu/conv_im2col.h), forward and weight
// gradient, against float64 references on strides, paddings, dilations,
// non-square kernels, odd sizes, one to four input channels, batches that
// span several chunks and both ways of sharing the threads; then through the
// Convolution ops, which must route layers with at most four input channels
// to it and agree with oneDNN's kernels.
//
// Tolerance, relative to the reference's magnitude: a forward output sums
// m = C kh kw products and the bias, a weight gradient m = N OH OW products.
// A float32 sum of m products, in any order and blocking, is within
// gamma_m sum|terms| of the exact value, gamma_m ~ m u, u = 2^-24 (Higham,
// "Accuracy and Stability of Numerical Algorithms", 3.1); and with
// probability at least 1 - 2m exp(-lambda^2 / 2) per output within
// lambda sqrt(m) u sum|terms| (Higham and Mary's probabilistic bound). The
// test takes the smaller of the two with lambda = 6 (below 1e-3 per output for
// the largest m here), sum|terms| from the float64 reference. Which order the
// kernel sums in is the compiler's: a build that vectorizes its `omp simd`
// reductions adds 16 interleaved partial sums, one that does not (clang under
// ASan) one long sequential sum, with errors about twice as large; both stay
// inside the bound (measured: at most 0.44 of it, a 3-term forward sum; the
// 27,000-term weight gradients at 0.0002 unvectorized, 0.0001 vectorized),
// and a wrong index or a missing term still costs about |term|, far outside
// it in the small problems.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/conv_im2col.h"
#include "backends/cpu/onednn_util.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/ops/conv.h"
#include "runtime/engine.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using cpu::Im2colConv;

constexpr double kUnitRoundoff = 0x1p-24;

using test::uniform;

// The problem for x [n, c, h, w], k filters of kh x kw, with its output size.
Im2colConv make(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t kh, int64_t kw, int64_t stride,
                int64_t pad, int64_t dilate) {
  Im2colConv s{.batch = n, .channels = c, .height = h, .width = w, .out_channels = k, .kernel_h = kh,
               .kernel_w = kw, .stride_h = stride, .stride_w = stride, .dilate_h = dilate, .dilate_w = dilate,
               .pad_top = pad, .pad_left = pad};
  s.out_height = (h + 2 * pad - dilate * (kh - 1) - 1) / stride + 1;
  s.out_width = (w + 2 * pad - dilate * (kw - 1) - 1) / stride + 1;
  return s;
}

std::string name(const Im2colConv& s) {
  return fmt::format("x[{},{},{},{}] k={} {}x{} stride {} pad {} dilate {} -> {}x{}", s.batch, s.channels, s.height,
                     s.width, s.out_channels, s.kernel_h, s.kernel_w, s.stride_h, s.pad_top, s.dilate_h,
                     s.out_height, s.out_width);
}

// Calls fn(n, k, c, oy, ox, ky, kx, x index) for every product of the convolution.
template <typename F>
void for_each_product(const Im2colConv& s, F&& fn) {
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t k = 0; k < s.out_channels; ++k)
      for (int64_t c = 0; c < s.channels; ++c)
        for (int64_t oy = 0; oy < s.out_height; ++oy)
          for (int64_t ox = 0; ox < s.out_width; ++ox)
            for (int64_t ky = 0; ky < s.kernel_h; ++ky)
              for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
                const int64_t iy = oy * s.stride_h - s.pad_top + ky * s.dilate_h;
                const int64_t ix = ox * s.stride_w - s.pad_left + kx * s.dilate_w;
                if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
                fn(n, k, c, oy, ox, ky, kx, ((n * s.channels + c) * s.height + iy) * s.width + ix);
              }
}

// The worst error relative to its bound min(m, 6 sqrt(m)) u sum|terms| (1 or less passes).
double error_vs_bound(const std::vector<float>& got, const std::vector<double>& want,
                      const std::vector<double>& magnitude, double terms) {
  EXPECT_EQ(got.size(), want.size());
  const double gamma = std::min(terms, 6 * std::sqrt(terms)) * kUnitRoundoff;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / (gamma * std::max(magnitude[i], 1e-30)));
  return worst;
}

void check(const Im2colConv& s, int threads = 2) {
  const int64_t K = s.out_channels, KK = s.kernel_h * s.kernel_w, P1 = s.out_height * s.out_width;
  auto x = uniform(s.batch * s.channels * s.height * s.width, 1);
  auto w = uniform(K * s.channels * KK, 2);
  auto b = uniform(K, 3);
  auto dy = uniform(s.batch * K * P1, 4);
  std::vector<double> y_want(static_cast<size_t>(s.batch * K * P1)), dw_want(w.size(), 0.0);
  std::vector<double> y_magnitude(y_want.size()), dw_magnitude(w.size(), 0.0);  // sum|terms|
  for (size_t i = 0; i < y_want.size(); ++i) {
    y_want[i] = b[i / static_cast<size_t>(P1) % static_cast<size_t>(K)];
    y_magnitude[i] = std::abs(y_want[i]);
  }
  for_each_product(s, [&](int64_t n, int64_t k, int64_t c, int64_t oy, int64_t ox, int64_t ky, int64_t kx, int64_t xi) {
    const auto wi = static_cast<size_t>(((k * s.channels + c) * s.kernel_h + ky) * s.kernel_w + kx);
    const auto yi = static_cast<size_t>((n * K + k) * P1 + oy * s.out_width + ox);
    const double forward = static_cast<double>(w[wi]) * x[static_cast<size_t>(xi)];
    const double backward = static_cast<double>(dy[yi]) * x[static_cast<size_t>(xi)];
    y_want[yi] += forward;
    y_magnitude[yi] += std::abs(forward);
    dw_want[wi] += backward;
    dw_magnitude[wi] += std::abs(backward);
  });
  engine::RunContext run{.device = Device::cpu(0), .num_threads = threads};
  std::vector<float> y(y_want.size(), 1e6f), dw(w.size(), 1e6f), dw_gemm(w.size(), 1e6f);
  if (s.channels <= 4) {
    cpu::im2col_forward(run, s, x.data(), w.data(), b.data(), y.data());
    cpu::im2col_backward_weight(run, s, x.data(), dy.data(), dw.data());
    const double forward = error_vs_bound(y, y_want, y_magnitude, static_cast<double>(s.channels * KK + 1));
    const double backward = error_vs_bound(dw, dw_want, dw_magnitude, static_cast<double>(s.batch * P1));
    EXPECT_LE(forward, 1.0) << "forward " << name(s);
    EXPECT_LE(backward, 1.0) << "weight gradient " << name(s);
  }
  cpu::gemm_backward_weight(run, s, DType::kFloat32, x.data(), dy.data(), dw_gemm.data());
  EXPECT_LE(error_vs_bound(dw_gemm, dw_want, dw_magnitude, static_cast<double>(s.batch * P1)), 1.0)
      << "matrix-product weight gradient " << name(s);
}

// The matrix-product weight gradient in bfloat16 and float16: inputs rounded
// to the type, products accumulated in float32 and the result rounded once,
// so within one rounding of the float64 result on the rounded inputs plus the
// float32 sum's bound.
void check_16bit(const Im2colConv& s, DType t) {
  const int64_t K = s.out_channels, KK = s.kernel_h * s.kernel_w, P1 = s.out_height * s.out_width;
  const double eps = t == DType::kBfloat16 ? 0x1p-8 : 0x1p-11;
  auto rounded = [&](std::vector<float> v) {
    return nd::array(v, Shape{static_cast<int64_t>(v.size())}).astype(t);
  };
  NDArray x = rounded(uniform(s.batch * s.channels * s.height * s.width, 1));
  NDArray dy = rounded(uniform(s.batch * K * P1, 4));
  auto xd = x.to_vector<double>(), dyd = dy.to_vector<double>();
  std::vector<double> want(static_cast<size_t>(K * s.channels * KK), 0.0), magnitude(want.size(), 0.0);
  for_each_product(s, [&](int64_t n, int64_t k, int64_t c, int64_t oy, int64_t ox, int64_t ky, int64_t kx, int64_t xi) {
    const auto wi = static_cast<size_t>(((k * s.channels + c) * s.kernel_h + ky) * s.kernel_w + kx);
    const double term = dyd[static_cast<size_t>((n * K + k) * P1 + oy * s.out_width + ox)] * xd[static_cast<size_t>(xi)];
    want[wi] += term;
    magnitude[wi] += std::abs(term);
  });
  NDArray dw = nd::zeros({K, s.channels, s.kernel_h, s.kernel_w}, {.dtype = t});
  engine::wait_all();
  engine::RunContext run{.device = Device::cpu(0), .num_threads = 2};
  cpu::gemm_backward_weight(run, s, t, x.data(), dy.data(), dw.data());
  auto got = dw.to_vector<double>();
  const double m = static_cast<double>(s.batch * P1), gamma = std::min(m, 6 * std::sqrt(m)) * kUnitRoundoff;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], eps * std::abs(want[i]) + gamma * magnitude[i]) << dtype_name(t) << " " << name(s);
}

TEST(ConvIm2col, MatchesReferenceOnManyShapes) {
  for (int64_t stride : {1, 2, 3})
    for (int64_t pad : {0, 1, 2})
      for (int64_t dilate : {1, 2}) {
        check(make(2, 3, 9, 8, 5, 3, 3, stride, pad, dilate));
        check(make(3, 4, 7, 11, 6, 5, 5, stride, pad + 1, dilate));
      }
  check(make(2, 1, 28, 28, 20, 3, 3, 1, 0, 1));  // LeNet's first layer
  check(make(2, 3, 32, 32, 64, 7, 7, 2, 3, 1));  // an RGB stem: 7x7, stride 2
  check(make(2, 2, 6, 9, 7, 1, 1, 2, 0, 1));     // 1x1, strided
  check(make(2, 4, 8, 10, 3, 2, 5, 1, 1, 1));    // non-square kernel
  check(make(1, 2, 3, 3, 4, 5, 5, 1, 3, 1));     // window wider than the image: padding alone feeds outputs
  check(make(2, 3, 9, 8, 5, 3, 3, 2, 1, 1), 1);  // one thread
}

TEST(ConvIm2col, BatchesSpanningSeveralChunksAndThreads) {
  // 1 x 9 taps x 676 positions x 4 bytes = 24 KB per image: 512 KiB chunks
  // hold 21; each of two threads takes a share of the batch (20 + 20, 21 + 20).
  check(make(40, 1, 28, 28, 20, 3, 3, 1, 0, 1));
  check(make(41, 1, 28, 28, 20, 3, 3, 1, 0, 1));
  // One image, large enough for two threads: they share each step.
  check(make(1, 4, 64, 64, 64, 5, 5, 1, 2, 1));
}

TEST(ConvGemmWeight, MatchesReferenceOnManyShapes) {
  for (int64_t stride : {1, 2})
    for (int64_t pad : {0, 1})
      for (int64_t dilate : {1, 2}) check(make(3, 16, 9, 8, 5, 3, 3, stride, pad, dilate));
  check(make(4, 32, 7, 7, 24, 3, 3, 2, 1, 1));   // ResNet's strided 3x3
  check(make(4, 32, 7, 7, 24, 1, 1, 2, 0, 1));   // and its strided 1x1 shortcut
  check(make(5, 24, 4, 4, 16, 3, 3, 1, 1, 1));   // a 4x4 output
  check(make(2, 8, 6, 9, 7, 2, 5, 1, 1, 1), 1);  // non-square kernel, one thread
  // 64 x 9 taps x 64 positions x 4 bytes = 144 KiB per image: 16 MiB chunks
  // hold 113, so 120 images take two products, the second accumulating.
  check(make(120, 64, 8, 8, 4, 3, 3, 1, 1, 1));
}

TEST(ConvGemmWeight, SixteenBitTypesRoundOnce) {
  for (DType t : {DType::kBfloat16, DType::kFloat16}) {
    if (!cpu::onednn::computes_in(t)) continue;  // the convolution ops widen such types to float32 first
    check_16bit(make(3, 16, 9, 8, 5, 3, 3, 2, 1, 1), t);
    check_16bit(make(4, 32, 4, 4, 8, 3, 3, 1, 1, 1), t);
  }
}

TEST(ConvGemmWeight, SelectionTakesSmallOutputs) {
  const int saved = cpu::gemm_weight_set_mode(-1);
  EXPECT_TRUE(cpu::gemm_weight_applies(make(2, 256, 7, 7, 512, 3, 3, 2, 1, 1)));  // 4x4 outputs
  EXPECT_TRUE(cpu::gemm_weight_applies(make(2, 512, 4, 4, 512, 3, 3, 1, 1, 1)));
  EXPECT_FALSE(cpu::gemm_weight_applies(make(2, 64, 28, 28, 128, 3, 3, 2, 1, 1)));  // oneDNN's own kernel
  EXPECT_FALSE(cpu::gemm_weight_applies(make(2, 64, 28, 28, 64, 3, 3, 1, 1, 1)));
  cpu::gemm_weight_set_mode(0);
  EXPECT_FALSE(cpu::gemm_weight_applies(make(2, 512, 4, 4, 512, 3, 3, 1, 1, 1)));
  cpu::gemm_weight_set_mode(1);
  EXPECT_TRUE(cpu::gemm_weight_applies(make(2, 64, 28, 28, 64, 3, 3, 1, 1, 1)));
  cpu::gemm_weight_set_mode(saved);
}

TEST(ConvIm2col, SelectionTakesFewInputChannels) {
  const bool saved = cpu::im2col_set_mode(true);
  EXPECT_TRUE(cpu::im2col_applies(make(2, 1, 28, 28, 20, 3, 3, 1, 0, 1)));
  EXPECT_TRUE(cpu::im2col_applies(make(2, 4, 28, 28, 20, 3, 3, 1, 0, 1)));
  EXPECT_FALSE(cpu::im2col_applies(make(2, 20, 13, 13, 50, 5, 5, 1, 0, 1)));  // oneDNN (nhwc) is faster
  cpu::im2col_set_mode(false);
  EXPECT_FALSE(cpu::im2col_applies(make(2, 1, 28, 28, 20, 3, 3, 1, 0, 1)));
  cpu::im2col_set_mode(saved);
}

// ---- through the ops: im2col on and off (oneDNN) must agree

TEST(ConvIm2col, ConvolutionOpsMatchOneDnn) {
  struct Case {
    Shape data;
    int filters;
    Shape kernel, stride, pad, dilate;
  };
  const Case cases[] = {{{3, 1, 28, 28}, 20, {3, 3}, {1, 1}, {0, 0}, {1, 1}},
                        {{2, 3, 11, 9}, 8, {3, 3}, {2, 2}, {1, 1}, {2, 2}},
                        {{2, 4, 17, 17}, 16, {5, 5}, {1, 1}, {2, 2}, {1, 1}}};
  for (const Case& c : cases) {
    ConvolutionAttrs a{.kernel = c.kernel, .stride = c.stride, .dilate = c.dilate, .pad = c.pad,
                       .num_filter = c.filters};
    const std::string what = fmt::format("data {} filters {} kernel {} stride {}", c.data, c.filters, c.kernel,
                                         c.stride);
    auto array = [](const Shape& shape, uint64_t seed) { return nd::array(uniform(shape.size(), seed), shape); };
    NDArray x = array(c.data, 5), w = array({c.filters, c.data[1], c.kernel[0], c.kernel[1]}, 6),
            b = array({c.filters}, 7);
    auto run = [&](bool on) {
      const bool saved = cpu::im2col_set_mode(on);
      NDArray y = invoke1(OpId::kConvolution, {x, w, b}, OpAttrs::make(a));
      NDArray dw = invoke1(OpId::kConvolutionBackwardWeight, {array(y.shape(), 8), x}, OpAttrs::make(a));
      std::vector<std::vector<float>> out{y.to_vector<float>(), dw.to_vector<float>()};
      cpu::im2col_set_mode(saved);
      return out;
    };
    auto direct = run(false), im2col = run(true);
    const char* names[] = {"forward", "weight gradient"};
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(direct[i].size(), im2col[i].size());
      double worst = 0, scale = 0;
      for (size_t j = 0; j < direct[i].size(); ++j) {
        worst = std::max(worst, static_cast<double>(std::abs(direct[i][j] - im2col[i][j])));
        scale = std::max(scale, static_cast<double>(std::abs(direct[i][j])));
      }
      EXPECT_LE(worst, 1e-5 * std::max(scale, 1.0)) << names[i] << " " << what;
    }
  }
}

// The weight-gradient op with the matrix products on and off (oneDNN's
// kernel) agrees, in float32 and bfloat16, with and without a bias.
TEST(ConvGemmWeight, WeightGradientOpMatchesOneDnn) {
  for (DType t : {DType::kFloat32, DType::kBfloat16})
    for (bool bias : {false, true}) {
      ConvolutionAttrs a{.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}, .num_filter = 32, .no_bias = !bias};
      NDArray x = nd::array(uniform(4 * 32 * 9 * 9, 5), Shape{4, 32, 9, 9}).astype(t);
      NDArray dy = nd::array(uniform(4 * 32 * 5 * 5, 8), Shape{4, 32, 5, 5}).astype(t);
      auto run = [&](int mode) {
        const int saved = cpu::gemm_weight_set_mode(mode);
        auto v = invoke1(OpId::kConvolutionBackwardWeight, {dy, x}, OpAttrs::make(a)).to_vector<double>();
        cpu::gemm_weight_set_mode(saved);
        return v;
      };
      auto direct = run(0), gemm = run(1);
      ASSERT_EQ(direct.size(), gemm.size());
      const double tol = t == DType::kFloat32 ? 1e-5 : 2e-2;
      double scale = 0;
      for (double v : direct) scale = std::max(scale, std::abs(v));
      for (size_t j = 0; j < direct.size(); ++j)
        ASSERT_NEAR(gemm[j], direct[j], tol * std::max(scale, 1.0)) << dtype_name(t) << " bias " << bias << " " << j;
    }
}

}  // namespace
}  // namespace kiln
