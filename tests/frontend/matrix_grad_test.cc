// Gradients of the matrix family (ir/ops/matrix.cc): every differentiable op
// through central finite differences in float64 on cpu(0) and cpu(1); the
// backward kernels (_backward_slice, _backward_slice_axis, _backward_take)
// against references written here, on sizes that take the parallel paths;
// every GradFn through a builder that only propagates types (as the compiled
// backward will), which checks the declared grad_uses_inputs/outputs, the
// needs_grad contract and missing output gradients; second-order gradients.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>
#include <stdexcept>

#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/grad.h"
#include "ir/ops/init.h"
#include "ir/ops/matrix.h"
#include "tests/frontend/grad_check.h"

namespace kiln {
namespace {

using testing::check_gradients;
using testing::GradCheckOptions;
using Fn = std::function<NDArray(std::span<const NDArray>)>;

class MatrixGrad : public ::testing::TestWithParam<int> {
 protected:
  Device dev() const { return Device::cpu(GetParam()); }
  // float64 values in [-1, 1].
  NDArray values(const Shape& s, uint32_t seed = 1) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(-1, 1);
    std::vector<double> v(static_cast<size_t>(s.size()));
    for (double& x : v) x = dist(gen);
    return nd::array(v, s, dev());
  }
  NDArray indices(const std::vector<int32_t>& v, const Shape& s) { return nd::array(v, s, dev()); }
};

TEST_P(MatrixGrad, Reshape) {
  struct Case {
    Shape in;
    IntTuple spec;
    bool reverse = false;
  };
  for (const Case& c : {Case{{2, 3, 4}, {4, -1}}, Case{{2, 3, 4}, {-3, 0}}, Case{{2, 3, 4}, {-4, 1, 2, -2}},
                        Case{{2, 3, 4}, {0, -1}, true}, Case{{2, 3, 4}, {-1}}, Case{{6}, {6}}}) {
    SCOPED_TRACE(fmt::format("{} shape={} reverse={}", c.in, print_attr(c.spec), c.reverse));
    check_gradients([&](std::span<const NDArray> x) { return nd::reshape(x[0], c.spec, c.reverse); }, {values(c.in)});
  }
}

TEST_P(MatrixGrad, Transpose) {
  for (IntTuple axes : {IntTuple{}, IntTuple{1, 0, 2}, IntTuple{2, 0, 1}, IntTuple{-1, 0, -2}}) {
    SCOPED_TRACE(print_attr(axes));
    check_gradients([&](std::span<const NDArray> x) { return nd::transpose(x[0], axes); }, {values({2, 3, 4})});
  }
  check_gradients([](std::span<const NDArray> x) { return nd::transpose(x[0]); }, {values({3, 5})});
}

TEST_P(MatrixGrad, ExpandDims) {
  for (int axis : {0, 1, 2, -1, -3}) {
    SCOPED_TRACE(axis);
    check_gradients([&](std::span<const NDArray> x) { return nd::expand_dims(x[0], axis); }, {values({2, 3})});
  }
}

TEST_P(MatrixGrad, BroadcastTo) {
  struct Case {
    Shape in, target;
  };
  for (const Case& c : {Case{{3, 1}, {2, 3, 4}}, Case{{3}, {4, 3}}, Case{{2, 1, 4}, {2, 3, 4}}, Case{{2, 1}, {0, 5}},
                        Case{{1, 1}, {3, 2}}, Case{{2, 3}, {2, 3}}}) {
    SCOPED_TRACE(fmt::format("{} to {}", c.in, c.target));
    check_gradients([&](std::span<const NDArray> x) { return nd::broadcast_to(x[0], c.target); }, {values(c.in)});
  }
}

TEST_P(MatrixGrad, ConcatOfDifferentSizes) {
  Fn along1 = [](std::span<const NDArray> x) { return nd::concat({x[0], x[1], x[2]}, 1); };
  std::vector<NDArray> in{values({2, 1, 3}, 1), values({2, 4, 3}, 2), values({2, 2, 3}, 3)};
  check_gradients(along1, in);
  check_gradients(along1, in, {.no_grad = {1}});
  check_gradients(along1, in, {.no_grad = {0, 2}});
  check_gradients(
      [](std::span<const NDArray> x) {
        return nd::concat({x[0], x[1], x[2]}, -1);
      },
      {values({2, 3, 1}, 4), values({2, 3, 2}, 5), values({2, 3, 4}, 6)});
  check_gradients(
      [](std::span<const NDArray> x) {
        return nd::concat({x[0], x[1], x[2]}, 0);
      },
      {values({3, 2}, 7), values({1, 2}, 8), values({2, 2}, 9)});
  check_gradients([](std::span<const NDArray> x) { return nd::concat({x[0]}, 0); }, {values({3, 2}, 10)});
}

TEST_P(MatrixGrad, Stack) {
  for (int axis : {0, 1, 2, -1, -3}) {
    SCOPED_TRACE(axis);
    Fn fn = [axis](std::span<const NDArray> x) { return nd::stack({x[0], x[1], x[2]}, axis); };
    std::vector<NDArray> in{values({2, 3}, 1), values({2, 3}, 2), values({2, 3}, 3)};
    check_gradients(fn, in);
    check_gradients(fn, in, {.no_grad = {0, 2}});
  }
}

TEST_P(MatrixGrad, SplitEveryOutputAlone) {
  struct Case {
    Shape in;
    int num, axis;
    bool squeeze;
  };
  for (const Case& c : {Case{{4, 6}, 3, 1, false}, Case{{4, 6}, 2, -2, false}, Case{{3, 2, 4}, 3, 0, true},
                        Case{{2, 3}, 3, -1, true}, Case{{2, 3}, 1, 0, false}, Case{{1, 3}, 1, 0, true}}) {
    for (int k = 0; k < c.num; ++k) {
      SCOPED_TRACE(fmt::format("{} num_outputs={} axis={} squeeze={} output {}", c.in, c.num, c.axis, c.squeeze, k));
      // The other outputs get no gradient: autograd passes zeros for them.
      check_gradients([&](std::span<const NDArray> x) { return nd::split(x[0], c.num, c.axis, c.squeeze)[k]; },
                      {values(c.in)});
    }
  }
}

TEST_P(MatrixGrad, SplitAllOutputs) {
  // Every output used, with different weights: the parts go back in order.
  for (bool squeeze : {false, true}) {
    SCOPED_TRACE(squeeze);
    check_gradients(
        [squeeze](std::span<const NDArray> x) {
          auto p = nd::split(x[0], 3, 1, squeeze);
          return p[0] + p[1] * 2.0 + p[2] * p[2];
        },
        {values({2, 3, 4})});
  }
}

TEST_P(MatrixGrad, SliceWithSteps) {
  struct Case {
    OptIntTuple begin, end, step;
  };
  using std::nullopt;
  for (const Case& c :
       {Case{{1}, {4}, {}}, Case{{0, 1}, {5, 6}, {2, 2}}, Case{{nullopt, -1}, {nullopt, nullopt}, {-1, -2}},
        Case{{-4, 5, 1}, {-1, 0, nullopt}, {2, -1, 1}}, Case{{nullopt, nullopt, 3}, {nullopt, nullopt, 0}, {2, 3, -1}},
        Case{{3}, {1}, {}}, Case{{10, -10}, {-10, 10}, {-3, 4}}}) {
    SCOPED_TRACE(fmt::format("begin={} end={} step={}", print_attr(c.begin), print_attr(c.end), print_attr(c.step)));
    check_gradients([&](std::span<const NDArray> x) { return nd::slice(x[0], c.begin, c.end, c.step); },
                    {values({5, 6, 4})});
  }
}

TEST_P(MatrixGrad, SliceAxis) {
  struct Case {
    int axis;
    int64_t begin;
    std::optional<int64_t> end;
  };
  for (const Case& c : {Case{0, 1, 3}, Case{-1, -3, std::nullopt}, Case{1, 0, -1}, Case{-2, 2, 2}}) {
    SCOPED_TRACE(fmt::format("axis={} begin={} end={}", c.axis, c.begin, c.end ? *c.end : -999));
    check_gradients([&](std::span<const NDArray> x) { return nd::slice_axis(x[0], c.axis, c.begin, c.end); },
                    {values({4, 5, 3})});
  }
}

TEST_P(MatrixGrad, TakeRepeatedIndicesAndModes) {
  struct Case {
    Shape a;
    std::vector<int32_t> ids;
    Shape ids_shape;
    int axis;
    TakeMode mode;
  };
  for (const Case& c : {
           Case{{5, 3}, {0, 2, 2, 4, 2}, {5}, 0, TakeMode::kClip},
           Case{{2, 4, 3}, {1, 1, 0, 3}, {2, 2}, 1, TakeMode::kClip},
           Case{{2, 4, 3}, {2, 0, 2, 2}, {4}, -1, TakeMode::kClip},
           Case{{5, 2}, {-1, 7, 12, 2, -6, 4}, {6}, 0, TakeMode::kWrap},  // -1, 7, 12 all land on 4 or 2
           Case{{3, 5}, {-3, 9, 1, 1}, {2, 2}, -1, TakeMode::kClip},      // -3 -> 0, 9 -> 4
           Case{{5}, {-1, 0, 4, -5, 4}, {5}, 0, TakeMode::kRaise},
           Case{{3, 2}, {}, {0}, 0, TakeMode::kClip},
       }) {
    SCOPED_TRACE(fmt::format("a={} indices={} axis={} mode={}", c.a, c.ids_shape, c.axis, print_attr(c.mode)));
    Fn fn = [&](std::span<const NDArray> x) { return nd::take(x[0], x[1], c.axis, c.mode); };
    check_gradients(fn, {values(c.a), indices(c.ids, c.ids_shape)}, {.no_grad = {1}});
  }
  // Float indices are truncated; they get no gradient even when they ask for one.
  NDArray a = values({4, 3}), ids = nd::array(std::vector<double>{1.7, 1.2, 3.0}, Shape{3}, dev());
  check_gradients([](std::span<const NDArray> x) { return nd::take(x[0], x[1]); }, {a, ids}, {.no_grad = {1}});
  NDArray ids_leaf = ids.copy(), a_leaf = a.copy();
  ids_leaf.attach_grad();
  a_leaf.attach_grad();
  NDArray y;
  {
    autograd::Record record;
    y = nd::sum(nd::take(a_leaf, ids_leaf));
  }
  autograd::backward({y});
  EXPECT_EQ(ids_leaf.grad().to_vector<double>(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(a_leaf.grad().to_vector<double>(), (std::vector<double>{0, 0, 0, 2, 2, 2, 0, 0, 0, 1, 1, 1}));
}

TEST_P(MatrixGrad, OneHotIsNotRecorded) {
  NDArray ids = nd::array(std::vector<double>{0, 2}, Shape{2}, dev());
  ids.attach_grad();
  autograd::Record record;
  EXPECT_FALSE(nd::one_hot(ids, 3).requires_grad());
}

TEST_P(MatrixGrad, ChainOfEveryOp) {
  Fn fn = [this](std::span<const NDArray> x) {
    NDArray b = nd::broadcast_to(nd::expand_dims(x[0], 0), {4, 2, 3});                   // [4,2,3]
    NDArray t = nd::transpose(x[1]);                                                     // [2,3]
    NDArray c = nd::concat({b, nd::stack({t, t * 2.0}, 0)}, 0);                          // [6,2,3]
    NDArray s = nd::slice(c, {1, std::nullopt}, {std::nullopt, std::nullopt}, {2, -1});  // [3,2,3]
    auto parts = nd::split(nd::reshape(s, {-1, 3}), 3, 1, true);                         // 3 x [6]
    NDArray u = nd::take(parts[1], indices({0, 5, 5, 2}, {4}));                          // [4]
    return u * x[2] + nd::slice_axis(parts[2], 0, 1, 5);
  };
  check_gradients(fn, {values({2, 3}, 1), values({3, 2}, 2), values({4}, 3)});
}

// ---- second order: gradients recorded with create_graph, differentiated again

TEST_P(MatrixGrad, SecondOrderThroughReshapeAndTranspose) {
  NDArray x = values({2, 6}, 1), y = values({4, 3}, 2);
  x.attach_grad();
  y.attach_grad();
  NDArray gx, h;
  {
    autograd::Record record;
    NDArray f = nd::sum(nd::transpose(nd::reshape(x, {3, 4})) * y);
    std::vector<NDArray> heads{f}, vars{x};
    gx = autograd::grad(heads, vars, {}, false, true)[0];  // reshape(transpose(y)) as [2,6]
    h = nd::sum(gx * gx);                                  // = sum(y * y)
  }
  EXPECT_EQ(gx.to_vector<double>(), nd::transpose(y).to_vector<double>());
  autograd::backward({h});
  std::vector<double> yv = y.to_vector<double>(), dy = y.grad().to_vector<double>();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_DOUBLE_EQ(dy[i], 2 * yv[i]) << i;
  for (double d : x.grad().to_vector<double>()) EXPECT_EQ(d, 0.0);
}

TEST_P(MatrixGrad, SecondOrderThroughSliceBackward) {
  // s = x[1::2, ::-2]; f = sum(s * s * c); gx = _backward_slice(2 s c);
  // h = sum(gx * v): dh/dx[i,j] = 2 c[p,q] v[i,j] where x[i,j] is s[p,q].
  NDArray x = values({4, 5}, 1), c = values({2, 3}, 2), v = values({4, 5}, 3);
  x.attach_grad();
  NDArray h;
  {
    autograd::Record record;
    NDArray s = nd::slice(x, {1, std::nullopt}, {std::nullopt, std::nullopt}, {2, -2});
    std::vector<NDArray> heads{nd::sum(s * s * c)}, vars{x};
    NDArray gx = autograd::grad(heads, vars, {}, false, true)[0];
    h = nd::sum(gx * v);
  }
  autograd::backward({h});
  std::vector<double> cv = c.to_vector<double>(), vv = v.to_vector<double>(), got = x.grad().to_vector<double>();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 5; ++j) {
      bool in = i % 2 == 1 && (4 - j) % 2 == 0;
      double want =
          in ? 2 * cv[static_cast<size_t>((i / 2) * 3 + (4 - j) / 2)] * vv[static_cast<size_t>(i * 5 + j)] : 0;
      EXPECT_NEAR(got[static_cast<size_t>(i * 5 + j)], want, 1e-12) << i << "," << j;
    }
  }
}

TEST_P(MatrixGrad, SecondOrderThroughTakeBackward) {
  // f = sum(take(x, ids)^2): gx[k] = 2 count[k] x[k]; h = sum(gx * v): dh/dx[k] = 2 count[k] v[k].
  NDArray x = values({6}, 1), v = values({6}, 2);
  std::vector<int32_t> ids{1, 1, 4, 0, 1, 9};  // 9 clips to 5
  std::vector<double> count{1, 3, 0, 0, 1, 1};
  x.attach_grad();
  NDArray gx, h;
  {
    autograd::Record record;
    NDArray t = nd::take(x, indices(ids, {6}));
    std::vector<NDArray> heads{nd::sum(t * t)}, vars{x};
    gx = autograd::grad(heads, vars, {}, false, true)[0];
    h = nd::sum(gx * v);
  }
  autograd::backward({h});
  std::vector<double> xv = x.to_vector<double>(), vv = v.to_vector<double>();
  std::vector<double> g1 = gx.to_vector<double>(), g2 = x.grad().to_vector<double>();
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_NEAR(g1[k], 2 * count[k] * xv[k], 1e-12) << k;
    EXPECT_NEAR(g2[k], 2 * count[k] * vv[k], 1e-12) << k;
  }
}

TEST_P(MatrixGrad, BackwardOpsHaveGradients) {
  // The backward ops are linear in out_grad, so finite differences apply.
  SliceBackwardAttrs sb{{1, std::nullopt}, {std::nullopt, 0}, {2, -1}, Shape{5, 4}};
  check_gradients([&](std::span<const NDArray> x) { return invoke1(OpId::kSliceBackward, {x[0]}, OpAttrs::make(sb)); },
                  {values({2, 3})});
  SliceAxisBackwardAttrs sab{-1, 1, 3, Shape{2, 5}};
  check_gradients(
      [&](std::span<const NDArray> x) { return invoke1(OpId::kSliceAxisBackward, {x[0]}, OpAttrs::make(sab)); },
      {values({2, 2})});
  TakeBackwardAttrs tb{1, TakeMode::kWrap, Shape{2, 3}};
  check_gradients(
      [&](std::span<const NDArray> x) {
        return invoke1(OpId::kTakeBackward, {x[0], x[1]}, OpAttrs::make(tb));
      },
      {values({2, 4}), indices({2, -1, 0, 5}, {4})}, {.no_grad = {1}});
}

INSTANTIATE_TEST_SUITE_P(Devices, MatrixGrad, ::testing::Values(0, 1),
                         [](const auto& info) { return fmt::format("cpu{}", info.param); });

// ---- the backward kernels against references, at sizes that run in parallel

std::vector<double> random_vector(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = dist(gen);
  return v;
}

// dx of take's gradient, by definition: each dy row added at its index's row.
std::vector<double> take_backward_reference(const std::vector<double>& dy, const std::vector<int64_t>& ids,
                                            int64_t outer, int64_t n, int64_t inner) {
  std::vector<double> dx(static_cast<size_t>(outer * n * inner), 0.0);
  auto m = static_cast<int64_t>(ids.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < m; ++j)
      for (int64_t i = 0; i < inner; ++i)
        dx[static_cast<size_t>((o * n + ids[static_cast<size_t>(j)]) * inner + i)] +=
            dy[static_cast<size_t>((o * m + j) * inner + i)];
  return dx;
}

TEST(MatrixBackwardKernels, TakeBackwardScatterAddsInEveryLayout) {
  struct Case {
    Shape data;
    int axis;
    int64_t m;  // number of indices, drawn from [0, n) with many repeats
  };
  // A long vector (parallel over destination rows), wide rows (parallel over
  // blocks of a row), many outer slices, and a small case (serial).
  for (const Case& c :
       {Case{{3000}, 0, 100000}, Case{{50, 3000}, 0, 200}, Case{{64, 20, 40}, 1, 50}, Case{{4, 3}, -1, 7}}) {
    SCOPED_TRACE(fmt::format("data={} axis={} m={}", c.data, c.axis, c.m));
    int axis = normalize_axis(c.axis, c.data.ndim(), "test");
    int64_t outer = 1, inner = 1, n = c.data[axis];
    for (int d = 0; d < axis; ++d) outer *= c.data[d];
    for (int d = axis + 1; d < c.data.ndim(); ++d) inner *= c.data[d];
    std::mt19937 gen(7);
    std::uniform_int_distribution<int64_t> pick(0, n / 3);  // a third of the rows: every row repeats
    std::vector<int64_t> ids(static_cast<size_t>(c.m));
    for (int64_t& i : ids) i = pick(gen);
    Shape dy_shape;
    for (int d = 0; d < axis; ++d) dy_shape.push_back(c.data[d]);
    dy_shape.push_back(c.m);
    for (int d = axis + 1; d < c.data.ndim(); ++d) dy_shape.push_back(c.data[d]);
    std::vector<double> dy = random_vector(dy_shape.size(), 3);
    NDArray out = invoke1(OpId::kTakeBackward, {nd::array(dy, dy_shape), nd::array(ids, Shape{c.m})},
                          OpAttrs::make(TakeBackwardAttrs{c.axis, TakeMode::kRaise, c.data}));
    std::vector<double> want = take_backward_reference(dy, ids, outer, n, inner), got = out.to_vector<double>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-9) << "element " << i;
  }
}

TEST(MatrixBackwardKernels, TakeBackwardFloat32AndFloat16) {
  std::vector<int32_t> ids{2, 0, 2, 2};
  std::vector<double> dy{1, 2, 3, 4, 5, 6, 7, 8}, want{3, 4, 0, 0, 13, 16};
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBfloat16}) {
    SCOPED_TRACE(dtype_name(t));
    NDArray out = invoke1(OpId::kTakeBackward, {nd::array(dy, Shape{4, 2}).astype(t), nd::array(ids, Shape{4})},
                          OpAttrs::make(TakeBackwardAttrs{0, TakeMode::kClip, Shape{3, 2}}));
    EXPECT_EQ(out.dtype(), t);
    EXPECT_EQ(out.astype(DType::kFloat64).to_vector<double>(), want);
  }
}

TEST(MatrixBackwardKernels, SliceBackwardPlacesDyIntoZeros) {
  // Large enough for the parallel fill and copy; a negative step on two axes.
  Shape data{40, 300, 33};
  OptIntTuple begin{-3, 1, std::nullopt}, end{std::nullopt, 299, std::nullopt}, step{-2, 3, -1};
  std::vector<SliceRange> r;
  for (int k = 0; k < 3; ++k) r.push_back(slice_range(data[k], begin[k], end[k], step[k]));
  Shape dy_shape{r[0].length, r[1].length, r[2].length};
  std::vector<double> dy = random_vector(dy_shape.size(), 5);
  NDArray out = invoke1(OpId::kSliceBackward, {nd::array(dy, dy_shape)},
                        OpAttrs::make(SliceBackwardAttrs{begin, end, step, data}));
  std::vector<double> want(static_cast<size_t>(data.size()), 0.0);
  for (int64_t p = 0; p < dy_shape[0]; ++p)
    for (int64_t q = 0; q < dy_shape[1]; ++q)
      for (int64_t s = 0; s < dy_shape[2]; ++s) {
        int64_t i = r[0].begin + p * r[0].step, j = r[1].begin + q * r[1].step, k = r[2].begin + s * r[2].step;
        want[static_cast<size_t>((i * data[1] + j) * data[2] + k)] =
            dy[static_cast<size_t>((p * dy_shape[1] + q) * dy_shape[2] + s)];
      }
  EXPECT_EQ(out.to_vector<double>(), want);

  // slice_axis: the middle block of axis 1, other entries zero (int32 too: pure data movement).
  NDArray dy2 = nd::arange(1, 13, 1, {.dtype = DType::kInt32}).reshape({2, 2, 3});
  NDArray out2 =
      invoke1(OpId::kSliceAxisBackward, {dy2}, OpAttrs::make(SliceAxisBackwardAttrs{1, -3, -1, Shape{2, 4, 3}}));
  EXPECT_EQ(out2.to_vector<int32_t>(),
            (std::vector<int32_t>{0, 0, 0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0, 0}));
}

TEST(MatrixBackwardKernels, InferenceRejectsMismatchedOutGrad) {
  NDArray dy = nd::zeros({2, 3}, {.dtype = DType::kFloat64});
  EXPECT_THROW(invoke1(OpId::kSliceBackward, {dy}, OpAttrs::make(SliceBackwardAttrs{{0}, {3}, {}, Shape{5, 3}})),
               ShapeError);
  EXPECT_THROW(invoke1(OpId::kSliceAxisBackward, {dy}, OpAttrs::make(SliceAxisBackwardAttrs{1, 0, 2, Shape{2, 5}})),
               ShapeError);
  NDArray ids = nd::array(std::vector<int32_t>{0, 1}, Shape{2}),
          ids3 = nd::array(std::vector<int32_t>{0, 1, 2}, Shape{3});
  EXPECT_NO_THROW(
      invoke1(OpId::kTakeBackward, {dy, ids}, OpAttrs::make(TakeBackwardAttrs{0, TakeMode::kClip, Shape{4, 3}})));
  EXPECT_THROW(
      invoke1(OpId::kTakeBackward, {dy, ids3}, OpAttrs::make(TakeBackwardAttrs{0, TakeMode::kClip, Shape{4, 3}})),
      ShapeError);
  EXPECT_THROW(invoke1(OpId::kTakeBackward, {dy.astype(DType::kInt32), ids},
                       OpAttrs::make(TakeBackwardAttrs{0, TakeMode::kClip, Shape{4, 3}})),
               TypeError);
  try {
    invoke1(OpId::kSliceBackward, {dy}, OpAttrs::make(SliceBackwardAttrs{{0}, {3}, {}, Shape{5, 3}}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("_backward_slice"), std::string::npos) << m;
    EXPECT_NE(m.find("[5,3]"), std::string::npos) << m;
  }
}

// ---- GradFns through a type-only builder (what the compiled backward sees)

// Values are types; ops are inferred, not run. A "poisoned" value stands for a
// forward input or output the OpDef says its gradient does not keep: reading
// it fails the test (input types come from GradArgs::input_types instead).
class TypeBuilder final : public GradBuilder {
 public:
  GradValue add(const TensorType& t, bool poisoned = false) {
    values_.push_back({t, poisoned});
    return GradValue{static_cast<int>(values_.size()) - 1};
  }
  std::vector<GradValue> apply(OpId op, std::span<const GradValue> inputs, const OpAttrs& attrs) override {
    std::vector<TensorType> in, out;
    for (GradValue v : inputs) in.push_back(type(v));
    infer_types(op_def(op), attrs, in, out);
    ops.push_back(op);
    std::vector<GradValue> result;
    for (const TensorType& t : out) result.push_back(add(t));
    return result;
  }
  TensorType type(GradValue v) const override {
    if (v.is_none()) throw std::logic_error("the gradient used a none value");
    const auto& [t, poisoned] = values_.at(static_cast<size_t>(v.index));
    if (poisoned) throw std::logic_error("the gradient read a forward value its OpDef does not keep");
    return t;
  }
  std::vector<OpId> ops;

 private:
  std::vector<std::pair<TensorType, bool>> values_;
};

struct GradRun {
  std::vector<std::optional<TensorType>> in_grads;  // nullopt: none
  std::vector<OpId> ops;
};

// Runs op's GradFn for inputs `in`; out_grads[k] false leaves output k's gradient none.
GradRun run_grad_fn(OpId op, const OpAttrs& attrs, const std::vector<TensorType>& in, const std::vector<bool>& needs,
                    std::vector<bool> out_grads = {}) {
  const OpDef& def = op_def(op);
  std::vector<TensorType> out;
  infer_types(def, attrs, in, out);
  if (out_grads.empty()) out_grads.assign(out.size(), true);
  TypeBuilder b;
  std::vector<GradValue> ins, outs, ogs;
  for (const TensorType& t : in) ins.push_back(b.add(t, !def.grad_uses_inputs));
  for (size_t k = 0; k < out.size(); ++k) outs.push_back(b.add(out[k], !def.grad_keeps_output(k)));
  for (size_t k = 0; k < out.size(); ++k) ogs.push_back(out_grads[k] ? b.add(out[k]) : GradValue{});
  std::unique_ptr<bool[]> need(new bool[in.size()]);
  for (size_t i = 0; i < in.size(); ++i) need[i] = needs[i];
  std::vector<GradValue> grads(in.size());
  GradArgs args{attrs, ins, outs, ogs, {need.get(), in.size()}, in};
  EXPECT_TRUE(def.differentiable && def.grad != nullptr) << def.name;
  def.grad(b, args, grads);
  GradRun r{{}, b.ops};
  for (GradValue g : grads) r.in_grads.push_back(g.is_none() ? std::nullopt : std::optional(b.type(g)));
  return r;
}

struct GradCase {
  OpId op;
  OpAttrs attrs;
  std::vector<TensorType> in;
  std::vector<bool> has_grad;  // which inputs can have a gradient (take's indices cannot)
};

std::vector<GradCase> grad_cases() {
  auto f = [](Shape s) { return TensorType{s, DType::kFloat32}; };
  TensorType idx{Shape{4}, DType::kInt32};
  return {
      {OpId::kReshape, OpAttrs::make(ReshapeAttrs{.shape = {-1, 4}}), {f({2, 3, 4})}, {true}},
      {OpId::kReshape, OpAttrs::make(ReshapeAttrs{.shape = {3, -1}}), {f({0, 3})}, {true}},       // zero size, one 0
      {OpId::kReshape, OpAttrs::make(ReshapeAttrs{.shape = {2, 0, 0}}), {f({0, 0, 2})}, {true}},  // several 0
      {OpId::kTranspose, OpAttrs::make(TransposeAttrs{{1, 2, 0}}), {f({2, 3, 4})}, {true}},
      {OpId::kExpandDims, OpAttrs::make(ExpandDimsAttrs{-1}), {f({2, 3})}, {true}},
      {OpId::kBroadcastTo, OpAttrs::make(BroadcastToAttrs{Shape{2, 3, 4}}), {f({3, 1})}, {true}},
      {OpId::kBroadcastTo, OpAttrs::make(BroadcastToAttrs{Shape{2, 0}}), {f({0})}, {true}},
      {OpId::kSlice, OpAttrs::make(SliceAttrs{{1}, {std::nullopt}, {-1}}), {f({5, 2})}, {true}},
      {OpId::kSliceAxis, OpAttrs::make(SliceAxisAttrs{1, 1, 3}), {f({2, 5})}, {true}},
      {OpId::kConcat, OpAttrs::make(ConcatAttrs{3, -1}), {f({2, 1}), f({2, 4}), f({2, 2})}, {true, true, true}},
      {OpId::kStack, OpAttrs::make(StackAttrs{1, 3}), {f({2, 3}), f({2, 3}), f({2, 3})}, {true, true, true}},
      {OpId::kSplit, OpAttrs::make(SplitAttrs{3, 1, false}), {f({2, 6})}, {true}},
      {OpId::kSplit, OpAttrs::make(SplitAttrs{3, -1, true}), {f({2, 3})}, {true}},
      {OpId::kTake, OpAttrs::make(TakeAttrs{1, TakeMode::kWrap}), {f({2, 5}), idx}, {true, false}},
      {OpId::kSliceBackward,
       OpAttrs::make(SliceBackwardAttrs{{1}, {std::nullopt}, {-1}, Shape{5, 2}}),
       {f({2, 2})},
       {true}},
      {OpId::kSliceAxisBackward, OpAttrs::make(SliceAxisBackwardAttrs{1, 1, 3, Shape{2, 5}}), {f({2, 2})}, {true}},
      {OpId::kTakeBackward,
       OpAttrs::make(TakeBackwardAttrs{1, TakeMode::kWrap, Shape{2, 5}}),
       {f({2, 4}), idx},
       {true, false}},
  };
}

TEST(MatrixGradFn, EveryInputGetsAGradientOfItsType) {
  for (const GradCase& c : grad_cases()) {
    SCOPED_TRACE(op_def(c.op).name);
    GradRun r = run_grad_fn(c.op, c.attrs, c.in, std::vector<bool>(c.in.size(), true));
    for (size_t i = 0; i < c.in.size(); ++i) {
      if (c.has_grad[i]) {
        ASSERT_TRUE(r.in_grads[i].has_value()) << "input " << i;
        EXPECT_EQ(*r.in_grads[i], c.in[i]) << "input " << i;
      } else {
        EXPECT_FALSE(r.in_grads[i].has_value()) << "input " << i;
      }
    }
  }
}

TEST(MatrixGradFn, InputsThatNeedNoGradientGetNothing) {
  for (const GradCase& c : grad_cases()) {
    SCOPED_TRACE(op_def(c.op).name);
    GradRun none = run_grad_fn(c.op, c.attrs, c.in, std::vector<bool>(c.in.size(), false));
    EXPECT_TRUE(none.ops.empty()) << none.ops.size() << " ops emitted";
    for (const auto& g : none.in_grads) EXPECT_FALSE(g.has_value());
    if (c.in.size() < 2) continue;
    // Only the last input: one op for Concat (one slice), none wasted on the others.
    std::vector<bool> needs(c.in.size(), false);
    needs.back() = true;
    GradRun last = run_grad_fn(c.op, c.attrs, c.in, needs);
    for (size_t i = 0; i + 1 < c.in.size(); ++i) EXPECT_FALSE(last.in_grads[i].has_value()) << "input " << i;
    if (c.has_grad.back()) {
      EXPECT_EQ(*last.in_grads.back(), c.in.back());
    }
    if (c.op == OpId::kConcat) {
      EXPECT_EQ(last.ops, std::vector<OpId>{OpId::kSliceAxis});
    }
  }
}

TEST(MatrixGradFn, SplitFillsMissingOutputGradientsWithZeros) {
  for (bool squeeze : {false, true}) {
    SCOPED_TRACE(squeeze);
    TensorType in{squeeze ? Shape{2, 3} : Shape{2, 6}, DType::kFloat64};
    OpAttrs attrs = OpAttrs::make(SplitAttrs{3, 1, squeeze});
    GradRun r = run_grad_fn(OpId::kSplit, attrs, {in}, {true}, {false, true, false});
    ASSERT_TRUE(r.in_grads[0].has_value());
    EXPECT_EQ(*r.in_grads[0], in);
    EXPECT_EQ(std::count(r.ops.begin(), r.ops.end(), OpId::kZeros), 2);
    GradRun nothing = run_grad_fn(OpId::kSplit, attrs, {in}, {true}, {false, false, false});
    EXPECT_FALSE(nothing.in_grads[0].has_value());
    EXPECT_TRUE(nothing.ops.empty());
  }
}

TEST(MatrixGradFn, EveryDifferentiableMatrixOpIsCovered) {
  std::set<OpId> covered;
  for (const GradCase& c : grad_cases()) covered.insert(c.op);
  for (OpId op : {OpId::kReshape, OpId::kTranspose, OpId::kSlice, OpId::kSliceAxis, OpId::kConcat, OpId::kStack,
                  OpId::kSplit, OpId::kTake, OpId::kOneHot, OpId::kExpandDims, OpId::kBroadcastTo, OpId::kSliceBackward,
                  OpId::kSliceAxisBackward, OpId::kTakeBackward}) {
    const OpDef& def = op_def(op);
    EXPECT_EQ(def.differentiable, op != OpId::kOneHot) << def.name;
    EXPECT_EQ(def.grad != nullptr, def.differentiable) << def.name;
    EXPECT_EQ(covered.contains(op), def.differentiable) << def.name;
  }
}

}  // namespace
}  // namespace kiln
