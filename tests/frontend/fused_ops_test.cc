// _kiln_conv_act and _kiln_fc_act (ir/ops/fused_layers.h) against the unfused ops
// on random data: every activation, with and without bias and residual, on
// shapes that reach each kernel path (oneDNN with blocked layouts and several
// threads, the GEMV loops, the small loops, float64); their gradients; their
// attributes' text form; errors.
#include <gtest/gtest.h>

#include "frontend/autograd.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/ops/fused_layers.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

constexpr ActType kActs[] = {ActType::kRelu, ActType::kSigmoid, ActType::kTanh, ActType::kSoftrelu};

NDArray activate(const NDArray& x, ActType act) {
  return invoke1(OpId::kActivation, {x}, OpAttrs::make(ActivationAttrs{act}));
}

void expect_near(const NDArray& got, const NDArray& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto g = got.astype(DType::kFloat64).to_vector<double>(), w = want.astype(DType::kFloat64).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " element " << i;
}

struct ConvCase {
  Shape data;
  int64_t filters, kernel, stride, pad;
};

TEST(FusedOps, ConvActMatchesConvolutionPlusSumPlusActivation) {
  const ConvCase cases[] = {
      {{2, 3, 7, 7}, 5, 3, 1, 1},      // small: one thread, whatever layout oneDNN picks
      {{4, 16, 14, 14}, 32, 3, 2, 1},  // blocked layouts, above the parallel threshold
      {{3, 8, 9, 9}, 16, 1, 1, 0},
  };
  for (const ConvCase& c : cases) {
    for (ActType act : kActs) {
      for (bool bias : {false, true}) {
        for (bool sum : {false, true}) {
          const std::string what = fmt::format("data {} filters {} kernel {} act {} bias {} sum {}", c.data, c.filters,
                                               c.kernel, print_attr(act), bias, sum);
          ConvActAttrs a;
          a.kernel = Shape{c.kernel, c.kernel};
          a.stride = Shape{c.stride, c.stride};
          a.pad = Shape{c.pad, c.pad};
          a.num_filter = static_cast<int>(c.filters);
          a.no_bias = !bias;
          a.act_type = act;
          a.with_sum = sum;
          NDArray x = nd::random::uniform(c.data, -1, 1);
          NDArray w = nd::random::uniform({c.filters, c.data[1], c.kernel, c.kernel}, -0.5, 0.5);
          std::vector<NDArray> in{x, w};
          if (bias) in.push_back(nd::random::uniform({c.filters}, -1, 1));
          NDArray conv = invoke1(OpId::kConvolution, in, OpAttrs::make(static_cast<const ConvolutionAttrs&>(a)));
          NDArray pre = conv;
          if (sum) {
            NDArray r = nd::random::uniform(conv.shape(), -1, 1);
            in.push_back(r);
            pre = conv + r;
          }
          NDArray got = invoke1(OpId::kConvAct, in, OpAttrs::make(a));
          expect_near(got, activate(pre, act), 1e-4, what);
        }
      }
    }
  }
}

// 1-D and 3-D windows, groups, dilation and stride: whatever Convolution
// takes, the fused op takes.
TEST(FusedOps, ConvActOtherGeometries) {
  struct Case {
    Shape data, kernel, stride, dilate, pad;
    int filters, groups;
  };
  const Case cases[] = {
      {{2, 4, 11}, {3}, {2}, {1}, {1}, 6, 2},
      {{2, 8, 9, 9}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, 8, 4},
      {{1, 2, 5, 5, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 3, 1},
  };
  for (const Case& c : cases) {
    ConvActAttrs a;
    a.kernel = c.kernel;
    a.stride = c.stride;
    a.dilate = c.dilate;
    a.pad = c.pad;
    a.num_filter = c.filters;
    a.num_group = c.groups;
    a.act_type = ActType::kTanh;
    a.with_sum = true;
    Shape w{c.filters, c.data[1] / c.groups};
    for (int64_t k : c.kernel) w.push_back(k);
    NDArray x = nd::random::uniform(c.data, -1, 1), wt = nd::random::uniform(w, -0.5, 0.5);
    NDArray b = nd::random::uniform({c.filters}, -1, 1);
    NDArray conv = invoke1(OpId::kConvolution, {x, wt, b}, OpAttrs::make(static_cast<const ConvolutionAttrs&>(a)));
    NDArray r = nd::random::uniform(conv.shape(), -1, 1);
    expect_near(invoke1(OpId::kConvAct, {x, wt, b, r}, OpAttrs::make(a)), activate(conv + r, a.act_type), 1e-4,
                fmt::format("data {} kernel {} groups {}", c.data, c.kernel, c.groups));
  }
}

TEST(FusedOps, ConvActSumMayShareTheOutputBuffer) {
  ConvActAttrs a;
  a.kernel = Shape{3, 3};
  a.pad = Shape{1, 1};
  a.num_filter = 8;
  a.with_sum = true;
  NDArray x = nd::random::uniform({2, 8, 10, 10}, -1, 1);
  NDArray w = nd::random::uniform({8, 8, 3, 3}, -0.3, 0.3);
  NDArray b = nd::random::uniform({8}, -1, 1);
  NDArray want =
      activate(invoke1(OpId::kConvolution, {x, w, b}, OpAttrs::make(static_cast<const ConvolutionAttrs&>(a))) + x,
               ActType::kRelu);
  NDArray r = x.copy();
  invoke(OpId::kConvAct, {x, w, b, r}, OpAttrs::make(a), {.out = {&r, 1}});  // out == sum
  expect_near(r, want, 1e-4, "in place");
}

TEST(FusedOps, FcActMatchesFullyConnectedPlusActivation) {
  struct Case {
    int64_t m, k, n;
  };
  // m = 1: the GEMV loops; 3x5x4: the small loops; 64x256x96: oneDNN matmul.
  const Case cases[] = {{1, 512, 256}, {1, 7, 3}, {3, 5, 4}, {64, 256, 96}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Case& c : cases) {
      for (ActType act : kActs) {
        for (bool bias : {false, true}) {
          const std::string what =
              fmt::format("{} [{},{}]x[{},{}] act {} bias {}", dtype, c.m, c.k, c.n, c.k, print_attr(act), bias);
          FcActAttrs a;
          a.num_hidden = c.n;
          a.no_bias = !bias;
          a.act_type = act;
          std::vector<NDArray> in{nd::random::uniform({c.m, c.k}, -1, 1).astype(dtype),
                                  nd::random::uniform({c.n, c.k}, -0.2, 0.2).astype(dtype)};
          if (bias) in.push_back(nd::random::uniform({c.n}, -1, 1).astype(dtype));
          NDArray fc = invoke1(OpId::kFullyConnected, in, OpAttrs::make(static_cast<const FullyConnectedAttrs&>(a)));
          NDArray got = invoke1(OpId::kFcAct, in, OpAttrs::make(a));
          expect_near(got, activate(fc, act), dtype == DType::kFloat32 ? 1e-4 : 1e-10, what);
        }
      }
    }
  }
}

// The fused ops' gradients are the unfused chain's.
TEST(FusedOps, GradientsMatchTheUnfusedChain) {
  ConvActAttrs a;
  a.kernel = Shape{3, 3};
  a.pad = Shape{1, 1};
  a.num_filter = 4;
  a.act_type = ActType::kTanh;
  a.with_sum = true;
  NDArray x = nd::random::uniform({2, 4, 5, 5}, -1, 1), w = nd::random::uniform({4, 4, 3, 3}, -0.3, 0.3);
  NDArray b = nd::random::uniform({4}, -1, 1), r = nd::random::uniform({2, 4, 5, 5}, -1, 1);
  auto grads = [&](bool fused) {
    std::vector<NDArray> vars{x.copy(), w.copy(), b.copy(), r.copy()};
    for (NDArray& v : vars) v.attach_grad();
    {
      autograd::Record record;
      NDArray y = fused ? invoke1(OpId::kConvAct, vars, OpAttrs::make(a))
                        : activate(invoke1(OpId::kConvolution, {vars[0], vars[1], vars[2]},
                                           OpAttrs::make(static_cast<const ConvolutionAttrs&>(a))) +
                                       vars[3],
                                   a.act_type);
      autograd::backward({y});
    }
    std::vector<NDArray> out;
    for (NDArray& v : vars) out.push_back(v.grad());
    return out;
  };
  auto want = grads(false), got = grads(true);
  for (size_t i = 0; i < want.size(); ++i) expect_near(got[i], want[i], 1e-4, fmt::format("input {}", i));

  FcActAttrs f;
  f.num_hidden = 3;
  f.act_type = ActType::kSigmoid;
  NDArray fx = nd::random::uniform({2, 5}, -1, 1), fw = nd::random::uniform({3, 5}, -1, 1);
  NDArray fb = nd::random::uniform({3}, -1, 1);
  auto fc_grads = [&](bool fused) {
    std::vector<NDArray> vars{fx.copy(), fw.copy(), fb.copy()};
    for (NDArray& v : vars) v.attach_grad();
    {
      autograd::Record record;
      NDArray y = fused ? invoke1(OpId::kFcAct, vars, OpAttrs::make(f))
                        : activate(invoke1(OpId::kFullyConnected, vars,
                                           OpAttrs::make(static_cast<const FullyConnectedAttrs&>(f))),
                                   f.act_type);
      autograd::backward({y});
    }
    std::vector<NDArray> out;
    for (NDArray& v : vars) out.push_back(v.grad());
    return out;
  };
  auto fwant = fc_grads(false), fgot = fc_grads(true);
  for (size_t i = 0; i < fwant.size(); ++i) expect_near(fgot[i], fwant[i], 1e-5, fmt::format("fc input {}", i));
}

TEST(FusedOps, AttributesRoundTripAndErrors) {
  const OpDef* conv = find_op("_kiln_conv_act");
  ASSERT_NE(conv, nullptr);
  AttrMap strings{{"kernel", "(3, 3)"}, {"num_filter", "8"}, {"act_type", "softrelu"}, {"with_sum", "True"}};
  OpAttrs parsed = conv->parse_attrs(conv->name, strings);
  EXPECT_EQ(parsed.to_strings(), strings);
  EXPECT_EQ(parsed.as<ConvActAttrs>().act_type, ActType::kSoftrelu);
  EXPECT_TRUE(parsed.as<ConvActAttrs>().with_sum);

  NDArray x = nd::zeros({1, 2, 4, 4}), w = nd::zeros({3, 2, 3, 3});
  ConvActAttrs a;
  a.kernel = Shape{3, 3};
  a.num_filter = 3;
  a.no_bias = true;
  a.with_sum = true;
  std::string e = test::error_of<ValueError>([&] { invoke1(OpId::kConvAct, {x, w}, OpAttrs::make(a)); });
  EXPECT_CONTAINS(e, "_kiln_conv_act");
  EXPECT_CONTAINS(e, "expected 3 inputs (data, weight, sum)");
  e = test::error_of<ShapeError>([&] { invoke1(OpId::kConvAct, {x, w, nd::zeros({1, 3, 3, 3})}, OpAttrs::make(a)); });
  EXPECT_CONTAINS(e, "sum is f32[1,3,3,3]");
  EXPECT_CONTAINS(e, "[1,3,2,2]");
  FcActAttrs f;
  f.num_hidden = 2;
  f.act_type = ActType::kSoftsign;
  e = test::error_of<NotSupported>([&] {
    invoke1(OpId::kFcAct, {nd::zeros({1, 3}), nd::zeros({2, 3}), nd::zeros({2})}, OpAttrs::make(f));
  });
  EXPECT_CONTAINS(e, "_kiln_fc_act");
  EXPECT_CONTAINS(e, "softsign");
  EXPECT_FALSE(op_def(OpId::kConvAct).grad == nullptr);
}

}  // namespace
}  // namespace kiln
