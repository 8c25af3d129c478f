// The reduce family (sum, mean, max, min, prod, argmax, argmin, norm) against
// loops over double values, on cpu(0) and cpu(1).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "frontend/autograd.h"
#include "runtime/storage.h"
#include "ir/ops/reduce.h"
#include "runtime/engine.h"
#include "tests/frontend/grad_check.h"

namespace kiln {
namespace {

enum class Kind { kSum, kMean, kMax, kMin, kProd, kNorm1, kNorm2 };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kSum:
      return "sum";
    case Kind::kMean:
      return "mean";
    case Kind::kMax:
      return "max";
    case Kind::kMin:
      return "min";
    case Kind::kProd:
      return "prod";
    case Kind::kNorm1:
      return "norm1";
    case Kind::kNorm2:
      return "norm2";
  }
  return "?";
}

NDArray run(Kind k, const NDArray& x, const IntTuple& axes, bool keepdims, bool exclude = false) {
  switch (k) {
    case Kind::kSum:
      return nd::sum(x, axes, keepdims, exclude);
    case Kind::kMean:
      return nd::mean(x, axes, keepdims, exclude);
    case Kind::kMax:
      return nd::max(x, axes, keepdims, exclude);
    case Kind::kMin:
      return nd::min(x, axes, keepdims, exclude);
    case Kind::kProd:
      return nd::prod(x, axes, keepdims, exclude);
    case Kind::kNorm1:
      return nd::norm(x, 1, axes, keepdims);
    case Kind::kNorm2:
      return nd::norm(x, 2, axes, keepdims);
  }
  return {};
}

// Reduces `x` of `shape` over the axes in `mask` (bit i: axis i), the plain
// way: one pass over the input in order, in double.
std::vector<double> reference(Kind k, const std::vector<double>& x, const Shape& shape, uint32_t mask) {
  Shape out_shape;
  for (int i = 0; i < shape.ndim(); ++i)
    if (!(mask >> i & 1)) out_shape.push_back(shape[i]);
  const int64_t outs = out_shape.size();
  int64_t count = 1;
  for (int i = 0; i < shape.ndim(); ++i)
    if (mask >> i & 1) count *= shape[i];
  double init = k == Kind::kProd ? 1 : k == Kind::kMax ? -INFINITY : k == Kind::kMin ? INFINITY : 0;
  std::vector<double> acc(outs, init);
  // Walk the input in order, keeping its multi-index and the output index.
  std::vector<int64_t> idx(shape.ndim(), 0), out_stride(shape.ndim(), 0);
  int64_t stride = 1;
  for (int i = shape.ndim() - 1; i >= 0; --i)
    if (!(mask >> i & 1)) out_stride[i] = stride, stride *= shape[i];
  int64_t o = 0;
  for (int64_t flat = 0; flat < shape.size(); ++flat) {
    if (flat > 0)
      for (int i = shape.ndim() - 1; i >= 0; --i) {
        o += out_stride[i];
        if (++idx[i] < shape[i]) break;
        o -= out_stride[i] * shape[i];
        idx[i] = 0;
      }
    double v = x[flat];
    double& a = acc[o];
    switch (k) {
      case Kind::kSum:
      case Kind::kMean:
        a += v;
        break;
      case Kind::kMax:
        a = std::max(a, v);
        break;
      case Kind::kMin:
        a = std::min(a, v);
        break;
      case Kind::kProd:
        a *= v;
        break;
      case Kind::kNorm1:
        a += std::abs(v);
        break;
      case Kind::kNorm2:
        a += v * v;
        break;
    }
  }
  for (double& a : acc) {
    if (k == Kind::kMean) a /= count;
    if (k == Kind::kNorm2) a = std::sqrt(a);
  }
  return acc;
}

Shape reference_shape(const Shape& shape, uint32_t mask, bool keepdims) {
  Shape out;
  for (int i = 0; i < shape.ndim(); ++i) {
    if (!(mask >> i & 1))
      out.push_back(shape[i]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rtol * std::max(1.0, std::abs(want[i]))) << what << " at " << i;
}

class Reduce : public ::testing::TestWithParam<int> {
 protected:
  Device dev() const { return Device::cpu(GetParam()); }
  NDArray normal(const Shape& s, DType t = DType::kFloat32) {
    return nd::random::normal(s, 0, 1, {.dtype = t, .device = dev()});
  }
};

constexpr Kind kAllKinds[] = {Kind::kSum, Kind::kMean, Kind::kMax, Kind::kMin, Kind::kProd, Kind::kNorm1, Kind::kNorm2};

// Every subset of axes of 3-D inputs (with size-1 axes too), given as positive
// and as negative axes, with and without keepdims; exclude gives the complement.
TEST_P(Reduce, EveryAxisCombination3D) {
  nd::random::seed(1);
  struct Check {
    NDArray y;
    Shape shape;
    std::vector<double> want;
    std::string what;
  };
  for (Shape shape : {Shape{3, 4, 5}, Shape{2, 1, 7}, Shape{1, 6, 1}, Shape{40, 3, 250}}) {
    NDArray x = nd::random::uniform(shape, 0.5, 1.5, {.device = dev()});  // prod stays finite
    auto xv = x.to_vector<double>();
    std::vector<Check> checks;  // queued first, read after: one engine round trip per value is slow
    for (Kind k : kAllKinds) {
      for (uint32_t mask = 0; mask < 8; ++mask) {
        for (bool keepdims : {false, true}) {
          IntTuple axes, negative;
          for (int i = 0; i < 3; ++i)
            if (mask >> i & 1) axes.push_back(i), negative.push_back(i - 3);
          uint32_t effective = mask == 0 ? 7u : mask;  // no axes: every axis
          std::string what = fmt::format("{} of {} over mask {} keepdims {}", kind_name(k), shape, mask, keepdims);
          auto want = reference(k, xv, shape, effective);
          for (const IntTuple& ax : {axes, negative})
            checks.push_back({run(k, x, ax, keepdims), reference_shape(shape, effective, keepdims), want, what});
          if (k == Kind::kNorm1 || k == Kind::kNorm2 || mask == 0) continue;
          checks.push_back({run(k, x, axes, keepdims, /*exclude=*/true), reference_shape(shape, 7u & ~mask, keepdims),
                            reference(k, xv, shape, 7u & ~mask), what + " exclude"});
        }
      }
    }
    for (auto& c : checks) {
      ASSERT_EQ(c.y.shape(), c.shape) << c.what;
      ASSERT_EQ(c.y.dtype(), DType::kFloat32) << c.what;
      expect_close(c.y.to_vector<double>(), c.want, 2e-5, c.what);
    }
  }
}

TEST_P(Reduce, FourDimensionalPatterns) {
  nd::random::seed(2);
  Shape shape{4, 3, 5, 6};
  NDArray x = normal(shape, DType::kFloat64);
  auto xv = x.to_vector<double>();
  for (uint32_t mask = 1; mask < 16; ++mask) {
    IntTuple axes;
    for (int i = 0; i < 4; ++i)
      if (mask >> i & 1) axes.push_back(i);
    for (Kind k : {Kind::kSum, Kind::kMax, Kind::kNorm2}) {
      NDArray y = run(k, x, axes, false);
      EXPECT_EQ(y.dtype(), DType::kFloat64);
      expect_close(y.to_vector<double>(), reference(k, xv, shape, mask), 1e-12,
                   fmt::format("{} mask {}", kind_name(k), mask));
    }
  }
}

TEST_P(Reduce, ReducingEverythingGivesAScalar) {
  NDArray x = nd::arange(24, {.device = dev()}).reshape({2, 3, 4});
  NDArray s = nd::sum(x);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.item<double>(), 276.0);
  EXPECT_EQ(nd::sum(x, {}, true).shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(nd::max(x).item<double>(), 23.0);
  EXPECT_EQ(nd::mean(x, {0, 1, 2}).item<double>(), 11.5);
  // exclude of every axis reduces nothing.
  EXPECT_EQ(nd::sum(x, {0, 1, 2}, false, true).to_vector<double>(), x.to_vector<double>());
}

TEST_P(Reduce, Integers) {
  std::vector<int32_t> v32 = {3, -7, 12, 5, 0, 9, -2, 4, 11, -8, 6, 1};
  std::vector<int64_t> v64(v32.begin(), v32.end());
  v64[5] = int64_t{1} << 40;  // beyond int32
  Shape shape{3, 4};
  for (DType t : {DType::kInt32, DType::kInt64}) {
    NDArray x = t == DType::kInt32 ? nd::array(v32, shape, dev()) : nd::array(v64, shape, dev());
    auto xv = x.to_vector<double>();
    for (Kind k : {Kind::kSum, Kind::kMax, Kind::kMin, Kind::kProd}) {
      for (uint32_t mask : {1u, 2u, 3u}) {
        IntTuple axes;
        for (int i = 0; i < 2; ++i)
          if (mask >> i & 1) axes.push_back(i);
        NDArray y = run(k, x, axes, false);
        EXPECT_EQ(y.dtype(), t);
        auto want = reference(k, xv, shape, mask);
        EXPECT_EQ(y.to_vector<double>(), want) << kind_name(k) << " " << dtype_name(t) << " mask " << mask;
      }
    }
    NDArray am = nd::argmax(x, 1);
    EXPECT_EQ(am.dtype(), t);
    EXPECT_EQ(am.to_vector<double>(), (std::vector<double>{2, 1, 0}));
    EXPECT_EQ(nd::argmin(x, 0).to_vector<double>(), (std::vector<double>{1, 2, 1, 2}));
  }
  // int32 sums wrap like int32 arithmetic.
  NDArray big = nd::full({4}, 1 << 30, {.dtype = DType::kInt32, .device = dev()});
  EXPECT_EQ(nd::sum(big).item<int32_t>(), 0);
}

TEST_P(Reduce, LargeInputsAreAccurateAndIndependentOfThreadCount) {
  nd::random::seed(3);
  auto& eng = engine::get();
  const int threads = eng.cpu_threads(dev());
  NDArray x = nd::random::uniform({1100, 1000}, 0, 1, {.device = dev()});  // all positive: a hard sum
  auto xv = x.to_vector<double>();
  NDArray x1 = x.reshape({1100000});
  struct Case {
    NDArray in;
    IntTuple axes;
    uint32_t mask;
  };
  std::vector<Case> cases = {{x1, {}, 1u},
                             {x, {1}, 2u},
                             {x, {0}, 1u},
                             {x.reshape({2, 550, 1000}), {1}, 2u},
                             {x.reshape({275000, 4}), {0}, 1u},     // short kept axis: rows packed
                             {x.reshape({1000, 275, 4}), {1}, 2u},  // packed, one piece per output
                             {x.reshape({100, 11, 1000}), {0, 2}, 5u},
                             {x.reshape({1100000, 1}), {0}, 1u},
                             {x.reshape({2, 550000}), {0}, 1u}};
  for (auto& c : cases) {
    for (Kind k : {Kind::kSum, Kind::kMean, Kind::kMax, Kind::kNorm2}) {
      std::string what = fmt::format("{} of {} over {}", kind_name(k), c.in.shape(), fmt::join(c.axes, ","));
      eng.set_cpu_threads(dev(), 1);
      auto one = run(k, c.in, c.axes, false).to_vector<float>();
      eng.set_cpu_threads(dev(), 2);
      auto two = run(k, c.in, c.axes, false).to_vector<float>();
      eng.set_cpu_threads(dev(), threads);
      EXPECT_EQ(one, two) << what;
      Shape s = c.in.shape();
      std::vector<double> got(one.begin(), one.end());
      expect_close(got, reference(k, xv, s, c.mask), 1e-5, what);
    }
  }
}

TEST_P(Reduce, ArgmaxTiesNaNAndFlattening) {
  // Rows with ties: the first occurrence wins.
  NDArray x = nd::array(std::vector<float>{1, 3, 3, 2, 5, 5, 5, 5, 0, -1, -1, 0}, {3, 4}, dev());
  EXPECT_EQ(nd::argmax(x, 1).to_vector<float>(), (std::vector<float>{1, 0, 0}));
  EXPECT_EQ(nd::argmin(x, 1).to_vector<float>(), (std::vector<float>{0, 0, 1}));
  EXPECT_EQ(nd::argmax(x, 0).to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(nd::argmax(x, -2).to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(nd::argmin(x, 0).to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
  NDArray flat = nd::argmax(x);
  EXPECT_EQ(flat.shape(), Shape{});
  EXPECT_EQ(flat.item<float>(), 4.0f);
  EXPECT_EQ(nd::argmax(x, std::nullopt, true).shape(), (Shape{1, 1}));
  EXPECT_EQ(nd::argmax(x, 1, true).shape(), (Shape{3, 1}));
  EXPECT_EQ(nd::argmin(x).item<float>(), 9.0f);
  // NaN counts as the extremum (its first occurrence).
  float nan = std::numeric_limits<float>::quiet_NaN();
  NDArray n = nd::array(std::vector<float>{1, nan, 7, nan, 2, 9}, {2, 3}, dev());
  EXPECT_EQ(nd::argmax(n, 1).to_vector<float>(), (std::vector<float>{1, 0}));
  EXPECT_EQ(nd::argmin(n, 0).to_vector<float>(), (std::vector<float>{1, 0, 0}));
  EXPECT_TRUE(std::isnan(nd::max(n).item<float>()));
  EXPECT_TRUE(std::isnan(nd::min(n, {1}).to_vector<float>()[0]));
}

// Index of the first maximum (or minimum) along `axis` (-1: flattened).
std::vector<double> arg_reference(const std::vector<float>& x, const Shape& shape, int axis, bool is_max) {
  int64_t outer = 1, len = shape.size(), inner = 1;
  if (axis >= 0) {
    len = shape[axis];
    for (int i = 0; i < axis; ++i) outer *= shape[i];
    inner = shape.size() / outer / len;
  }
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      int64_t best = 0;
      for (int64_t r = 1; r < len; ++r) {
        float v = x[(o * len + r) * inner + j], b = x[(o * len + best) * inner + j];
        if (is_max ? v > b : v < b) best = r;
      }
      out.push_back(static_cast<double>(best));
    }
  return out;
}

TEST_P(Reduce, ArgmaxAgainstReferenceWithManyTies) {
  uint32_t state = 12345;
  for (Shape shape : {Shape{3, 4, 5}, Shape{7, 300, 9}, Shape{3, 70000}, Shape{70000, 3}, Shape{1 << 20}}) {
    std::vector<float> v(static_cast<size_t>(shape.size()));
    for (float& f : v) f = static_cast<float>((state = state * 1664525u + 1013904223u) >> 29);  // 0..7
    NDArray x = nd::array(v, shape, dev());
    for (int axis = -1; axis < shape.ndim(); ++axis) {
      std::optional<int> ax = axis < 0 ? std::nullopt : std::optional<int>(axis);
      EXPECT_EQ(nd::argmax(x, ax).to_vector<double>(), arg_reference(v, shape, axis, true))
          << "argmax " << shape.to_string() << " axis " << axis;
      EXPECT_EQ(nd::argmin(x, ax).to_vector<double>(), arg_reference(v, shape, axis, false))
          << "argmin " << shape.to_string() << " axis " << axis;
    }
  }
}

TEST_P(Reduce, EmptyAxes) {
  NDArray e = nd::zeros({0, 3}, {.device = dev()});
  EXPECT_EQ(nd::sum(e, {0}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(nd::prod(e, {0}).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(nd::norm(e, 2, {0}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(nd::sum(e).item<float>(), 0.0f);
  EXPECT_EQ(nd::max(e, {1}).shape(), Shape{0});  // nothing to compute
  EXPECT_THROW(nd::mean(e, {0}), ValueError);
  EXPECT_THROW(nd::max(e), ValueError);
  EXPECT_THROW(nd::min(e, {0}), ValueError);
  EXPECT_THROW(nd::argmax(e, 0), ValueError);
  EXPECT_THROW(nd::argmin(e), ValueError);
}

TEST_P(Reduce, Errors) {
  NDArray x = nd::zeros({2, 3, 4}, {.device = dev()});
  for (auto [name, fn] : std::vector<std::pair<std::string, std::function<NDArray()>>>{
           {"sum", [&] { return nd::sum(x, {3}); }},
           {"mean",
            [&] {
              return nd::mean(x, {0, -4});
            }},
           {"max", [&] { return nd::max(x, {5}, false, true); }},
           {"argmax", [&] { return nd::argmax(x, 3); }},
           {"argmin", [&] { return nd::argmin(x, -4); }},
           {"norm", [&] { return nd::norm(x, 2, {7}); }}}) {
    try {
      fn();
      ADD_FAILURE() << name << ": expected IndexError";
    } catch (const IndexError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
      EXPECT_NE(msg.find("3 axes"), std::string::npos) << msg;
      EXPECT_NE(msg.find("axis"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(nd::sum(x, {1, -2}), ValueError);
  EXPECT_THROW(nd::norm(x, 3), ValueError);
  NDArray i = nd::zeros({4}, {.dtype = DType::kInt32, .device = dev()});
  EXPECT_THROW(nd::mean(i), TypeError);
  EXPECT_THROW(nd::norm(i), TypeError);
  EXPECT_THROW(nd::sum(nd::zeros({4}, {.dtype = DType::kUint8, .device = dev()})), TypeError);
  EXPECT_THROW(nd::max(nd::zeros({4}, {.dtype = DType::kUint8, .device = dev()})), TypeError);
}

TEST_P(Reduce, ParsesMXNetAttributes) {
  NDArray x = nd::arange(24, {.device = dev()}).reshape({2, 3, 4});
  auto parsed = [](std::string_view op, const AttrMap& strings) {
    const OpDef* def = find_op(op);
    EXPECT_NE(def, nullptr) << op;
    return def->parse_attrs(def->name, strings);
  };
  NDArray s = invoke1(OpId::kSum, {x}, parsed("sum", {{"axis", "(0, 2)"}, {"keepdims", "True"}}));
  EXPECT_EQ(s.shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{60, 92, 124}));
  EXPECT_EQ(invoke1(OpId::kSum, {x}, parsed("sum_axis", {{"axis", "None"}})).item<double>(), 276.0);
  EXPECT_EQ(invoke1(OpId::kSum, {x}, parsed("sum", {{"axis", "()"}})).item<double>(), 276.0);
  EXPECT_EQ(invoke1(OpId::kMax, {x}, parsed("max", {{"axis", "1"}, {"exclude", "True"}})).to_vector<double>(),
            (std::vector<double>{15, 19, 23}));
  EXPECT_EQ(invoke1(OpId::kArgmax, {x}, parsed("argmax", {{"axis", "-1"}})).shape(), (Shape{2, 3}));
  EXPECT_EQ(invoke1(OpId::kNorm, {x}, parsed("norm", {{"ord", "1"}, {"axis", "(1,)"}})).to_vector<double>(),
            (std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57}));
  EXPECT_THROW(parsed("sum", {{"axes", "(0,)"}}), ValueError);
  // Printing gives back MXNet's strings (only values that differ from the defaults).
  AttrMap printed = OpAttrs::make(ReduceAttrs{.axis = IntTuple{0, 2}, .keepdims = true}).to_strings();
  EXPECT_EQ(printed, (AttrMap{{"axis", "(0, 2)"}, {"keepdims", "True"}}));
}

// Gradients through central differences in float64 (tests/frontend/grad_check.h).
TEST_P(Reduce, Gradients) {
  std::vector<double> v(12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? -1 : 1) * (0.5 + 0.09 * static_cast<double>((i * 7) % 12));
  NDArray x = nd::array(v, {2, 3, 2}, dev());  // distinct values, none near 0
  for (Kind k : kAllKinds)
    for (const IntTuple& axes : {IntTuple{}, IntTuple{1}, IntTuple{0, -1}}) {
      bool keepdims = axes.size() == 1;
      SCOPED_TRACE(fmt::format("{} over ({}) keepdims {}", kind_name(k), fmt::join(axes, ","), keepdims));
      testing::check_gradients([&](std::span<const NDArray> in) { return run(k, in[0], axes, keepdims); }, {x});
    }
  testing::check_gradients([&](std::span<const NDArray> in) { return nd::mean(in[0], {1}, false, true); }, {x});
  // Tied maxima all receive the gradient (MXNet's rule): d/dx sum(max(x)) for x = [1, 1] is [1, 1].
  NDArray t = nd::array(std::vector<double>{1, 1, 0}, dev());
  t.attach_grad();
  {
    autograd::Record record;
    NDArray y = nd::max(t);
    autograd::backward({y});
  }
  EXPECT_EQ(t.grad().to_vector<double>(), (std::vector<double>{1, 1, 0}));
}

// Sum and mean read only their input's shape: the tape does not keep the
// input alive until backward (a loss summed over activations would).
TEST_P(Reduce, SumAndMeanDoNotKeepTheirInputForBackward) {
  for (bool mean : {false, true}) {
    NDArray x = nd::array(std::vector<double>(64 * 4096, 0.5), {64, 4096}, dev());
    x.attach_grad();
    storage::Pool& pool = storage::pool(dev());
    NDArray loss;
    int64_t with_z = 0, without_z = 0;
    {
      autograd::Record record;
      NDArray z = x * 3.0;  // its gradient keeps neither x nor z
      loss = mean ? nd::mean(z) : nd::sum(z);
      engine::wait_all();
      with_z = pool.stats().in_use;
    }
    engine::wait_all();
    without_z = pool.stats().in_use;
    EXPECT_LE(without_z, with_z - x.size() * static_cast<int64_t>(sizeof(double)))
        << (mean ? "mean" : "sum") << " still holds its input";
    autograd::backward({loss});
    const double want = mean ? 3.0 / static_cast<double>(x.size()) : 3.0;
    for (double g : x.grad().to_vector<double>()) ASSERT_DOUBLE_EQ(g, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Reduce, ::testing::Values(0, 1),
                         [](const auto& info) { return "cpu" + std::to_string(info.param); });

}  // namespace
}  // namespace kiln
