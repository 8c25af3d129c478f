// softmax with use_length (MXNet's masked softmax): against a float64
// reference on the last and a middle axis, its gradient against finite
// differences, traced and exported as MXNet writes it, and bad input.
// The registry walk (higher_order_grad_test) checks first and second order.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "frontend/kiln.h"
#include "frontend/trace.h"
#include "frontend/formats/mxnet/symbol_json.h"
#include "tests/frontend/grad_check.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

// softmax over the first len elements of each row (o, c) of [outer, n, inner].
std::vector<double> reference(const std::vector<double>& x, const std::vector<int64_t>& len, int64_t outer, int64_t n,
                              int64_t inner) {
  std::vector<double> y(x.size(), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      const int64_t l = std::clamp<int64_t>(len[static_cast<size_t>(o * inner + c)], 0, n);
      auto at = [&](int64_t j) { return static_cast<size_t>((o * n + j) * inner + c); };
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < l; ++j) m = std::max(m, x[at(j)]);
      for (int64_t j = 0; j < l; ++j) s += std::exp(x[at(j)] - m);
      for (int64_t j = 0; j < l; ++j) y[at(j)] = std::exp(x[at(j)] - m) / s;
    }
  return y;
}

TEST(SoftmaxLength, MasksEachRowAfterItsLength) {
  std::vector<double> xv;
  for (float f : test::uniform(4 * 6, -3, 3, 1)) xv.push_back(f);
  NDArray x = nd::array(xv, Shape{4, 6});
  std::vector<int64_t> len{6, 3, 0, 9};  // full, partial, empty, clamped
  NDArray y = nd::softmax(x, nd::array(std::vector<int32_t>{6, 3, 0, 9}, Shape{4}));
  auto got = y.to_vector<double>(), want = reference(xv, len, 4, 6, 1);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-15) << i;
  // A middle axis, float32, float lengths.
  std::vector<double> x3;
  for (float f : test::uniform(2 * 5 * 3, -3, 3, 2)) x3.push_back(f);
  NDArray y3 = nd::softmax(nd::array(x3, Shape{2, 5, 3}).astype(DType::kFloat32),
                           nd::array(std::vector<float>{5, 1, 2, 4, 3, 0}, Shape{2, 3}), 1);
  auto got3 = y3.to_vector<double>(), want3 = reference(x3, {5, 1, 2, 4, 3, 0}, 2, 5, 3);
  for (size_t i = 0; i < got3.size(); ++i) ASSERT_NEAR(got3[i], want3[i], 1e-6) << i;
}

TEST(SoftmaxLength, GradientMatchesFiniteDifferences) {
  NDArray len = nd::array(std::vector<int32_t>{2, 5, 4}, Shape{3});
  std::vector<double> xv;
  for (float f : test::uniform(15, -2, 2, 3)) xv.push_back(f);
  testing::check_gradients([&](std::span<const NDArray> x) { return nd::softmax(x[0], len); },
                           {nd::array(xv, Shape{3, 5})});
}

TEST(SoftmaxLength, TracesAndExportsWithMxnetsSpelling) {
  std::string json;
  {
    trace::Tracer tracer("softmax_length", Device::cpu(0));
    NDArray x = tracer.add_input("data", {Shape{2, 4}, DType::kFloat32});
    NDArray l = tracer.add_input("length", {Shape{2}, DType::kInt32});
    NDArray y = nd::softmax(x, l);
    json = mxnet::to_json(tracer.finish({&y, 1}).graph);
  }
  EXPECT_CONTAINS(json, "\"use_length\": \"True\"");
  EXPECT_CONTAINS(json, "\"op\": \"softmax\"");
}

TEST(SoftmaxLength, BadInputIsNamed) {
  NDArray x = nd::zeros({2, 4});
  std::string msg = test::error_of<ShapeError>([&] { nd::softmax(x, nd::zeros({4})); });
  EXPECT_CONTAINS(msg, "length has shape [4]");
  EXPECT_CONTAINS(msg, "[2]");
  const OpDef* d = find_op("log_softmax");
  OpAttrs a = d->parse_attrs("log_softmax", {{"use_length", "True"}});
  EXPECT_THROW(invoke(OpId::kLogSoftmax, {x}, a), NotSupported);
  EXPECT_THROW(invoke(OpId::kSoftmax, {x}, a), ValueError);  // use_length without a length
}

}  // namespace
}  // namespace kiln
