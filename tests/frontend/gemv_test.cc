// The few-sample dense-layer kernel (backends/cpu/gemv.h) against a float64
// reference: batch 1..4, with and without bias, every fused activation,
// sizes that are not multiples of the 8 lanes or the row blocks, one and two
// threads through cpu::dense_f32 (whose row split must not change a bit of
// the result); then through FullyConnected, _kiln_fc_act and dot, whose
// few-sample cases run it, flattened and not.
//
// Tolerance: x in [-1, 1], w in [-0.5, 0.5], so |x . w| <= k/2; float32
// sums of k products are compared relative to sqrt(k) (measured < 1e-6 for
// k <= 1031).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/gemv.h"
#include "backends/cpu/linalg_kernels.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/ops/fused_layers.h"
#include "ir/ops/linalg.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using test::uniform;

double activate(std::optional<ActType> act, double v) {
  if (!act) return v;
  switch (*act) {
    case ActType::kRelu: return v > 0 ? v : 0;
    case ActType::kSigmoid: return 1 / (1 + std::exp(-v));
    case ActType::kTanh: return std::tanh(v);
    case ActType::kSoftrelu: return std::log1p(std::exp(v));
    case ActType::kSoftsign: break;
  }
  return NAN;
}

// y [m, n] = act(x [m, k] . w [n, k]^T + bias) in float64.
std::vector<double> reference(int64_t m, int64_t k, int64_t n, const std::vector<float>& x,
                              const std::vector<float>& w, const float* bias, std::optional<ActType> act) {
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? bias[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) s += double(x[size_t(i * k + p)]) * double(w[size_t(j * k + p)]);
      y[size_t(i * n + j)] = activate(act, s);
    }
  return y;
}

void expect_near(const float* got, const std::vector<double>& want, int64_t k, const std::string& what) {
  const double tol = 2e-6 * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1))) + 1e-6;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " element " << i;
}

const std::optional<ActType> kActs[] = {std::nullopt, ActType::kRelu, ActType::kSigmoid, ActType::kTanh,
                                        ActType::kSoftrelu};

std::string describe(int64_t m, int64_t k, int64_t n, bool bias, std::optional<ActType> act, int threads) {
  return fmt::format("dense_f32 m={} k={} n={} bias={} act={} threads={}", m, k, n, bias,
                     act ? print_attr(*act) : "none", threads);
}

// Every batch 1..4 on sizes around the lane count (k) and row blocks (n),
// plus two the threads split (m * n * k >= 2^17).
TEST(Gemv, MatchesTheReference) {
  struct Size {
    int64_t k, n;
  };
  const Size sizes[] = {{0, 5},  {1, 1},   {3, 2},    {7, 9},   {8, 8},     {9, 13},
                        {16, 4}, {31, 37}, {128, 2},  {513, 7}, {517, 300}, {1031, 129}};
  for (int64_t m = 1; m <= cpu::kGemvMaxSamples; ++m) {
    for (Size s : sizes) {
      const auto x = uniform(m * s.k, -1, 1, 1), w = uniform(s.n * s.k, -0.5, 0.5, 2), b = uniform(s.n, -1, 1, 3);
      for (bool bias : {false, true}) {
        for (std::optional<ActType> act : kActs) {
          const auto want = reference(m, s.k, s.n, x, w, bias ? b.data() : nullptr, act);
          std::vector<float> one;
          for (int threads : {1, 2}) {
            const std::string what = describe(m, s.k, s.n, bias, act, threads);
            std::vector<float> y(static_cast<size_t>(m * s.n), NAN);
            engine::RunContext run{.device = Device::cpu(0), .num_threads = threads};
            cpu::dense_f32(run, {m, s.k, s.n}, x.data(), w.data(), bias ? b.data() : nullptr, act, y.data());
            expect_near(y.data(), want, s.k, what);
            if (threads == 1) one = y;
            else ASSERT_EQ(y, one) << what << ": two threads changed the result";
          }
        }
      }
    }
  }
}

// A row's result does not depend on the range it is computed in nor on the
// other samples of the batch.
TEST(Gemv, RowsDoNotDependOnTheRangeOrTheBatch) {
  const int64_t k = 77, n = 45;
  const auto x = uniform(4 * k, -1, 1, 4), w = uniform(n * k, -0.5, 0.5, 5), b = uniform(n, -1, 1, 6);
  std::vector<float> whole(static_cast<size_t>(4 * n));
  cpu::gemv_rows({4, k, n}, x.data(), w.data(), b.data(), ActType::kTanh, whole.data(), 0, n);
  for (int64_t m = 1; m <= 4; ++m) {
    for (int64_t split : {1, 3, 8, 13, 44}) {
      std::vector<float> y(static_cast<size_t>(m * n), NAN);
      cpu::gemv_rows({m, k, n}, x.data(), w.data(), b.data(), ActType::kTanh, y.data(), 0, split);
      cpu::gemv_rows({m, k, n}, x.data(), w.data(), b.data(), ActType::kTanh, y.data(), split, n);
      for (int64_t i = 0; i < m * n; ++i)
        ASSERT_EQ(y[size_t(i)], whole[size_t(i)]) << "m=" << m << " split at row " << split << " element " << i;
    }
  }
}

// Through the ops: FullyConnected (flattened [m, 3, 7] and not: [1, m, 21]),
// _kiln_fc_act and dot with a transposed right operand.
TEST(Gemv, OpsWithFewSamplesMatchTheReference) {
  const int64_t n = 11, k = 21;
  for (int64_t m = 1; m <= 4; ++m) {
    const auto xv = uniform(m * k, -1, 1, 7), wv = uniform(n * k, -0.5, 0.5, 8), bv = uniform(n, -1, 1, 9);
    NDArray w = nd::array(wv, Shape{n, k}), b = nd::array(bv, Shape{n});
    for (bool flatten : {true, false}) {
      NDArray x = nd::array(xv, flatten ? Shape{m, 3, 7} : Shape{1, m, k});
      for (bool bias : {false, true}) {
        const std::string what = fmt::format("FullyConnected m={} flatten={} bias={}", m, flatten, bias);
        NDArray y = nd::fully_connected(x, w, bias ? b : NDArray(), n, flatten);
        ASSERT_EQ(y.shape(), (flatten ? Shape{m, n} : Shape{1, m, n})) << what;
        expect_near(y.to_vector<float>().data(), reference(m, k, n, xv, wv, bias ? bv.data() : nullptr, std::nullopt),
                    k, what);
        for (std::optional<ActType> act : kActs) {
          if (!act) continue;
          FcActAttrs a;
          a.num_hidden = n;
          a.no_bias = !bias;
          a.flatten = flatten;
          a.act_type = *act;
          std::vector<NDArray> in{x, w};
          if (bias) in.push_back(b);
          NDArray f = invoke1(OpId::kFcAct, in, OpAttrs::make(a));
          expect_near(f.to_vector<float>().data(), reference(m, k, n, xv, wv, bias ? bv.data() : nullptr, act), k,
                      what + " _kiln_fc_act " + print_attr(*act));
        }
      }
    }
    NDArray x = nd::array(xv, Shape{m, k});
    NDArray d = invoke1(OpId::kDot, {x, w}, OpAttrs::make(DotAttrs{.transpose_b = true}));
    expect_near(d.to_vector<float>().data(), reference(m, k, n, xv, wv, nullptr, std::nullopt), k,
                fmt::format("dot m={}", m));
  }
}

}  // namespace
}  // namespace kiln
