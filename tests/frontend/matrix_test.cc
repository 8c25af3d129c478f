// The matrix family (ir/ops/matrix.cc, backends/cpu/matrix*.cc, frontend/nd_matrix.cc):
// every op against a reference computed here by index arithmetic, on cpu(0)
// and cpu(1), over dtypes of every element size; MXNet's Reshape rules; errors.
//
// Inputs are iota arrays (element i holds the value i), so the expected
// output is simply the flat input index each output element comes from.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>

#include "backends/cpu/matrix_copy.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/ops/matrix.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

using Index = std::vector<int64_t>;

Index unravel(int64_t flat, const Shape& s) {
  Index idx(static_cast<size_t>(s.ndim()));
  for (int d = s.ndim() - 1; d >= 0; --d) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}

int64_t ravel(const Index& idx, const Shape& s) {
  int64_t flat = 0;
  for (int d = 0; d < s.ndim(); ++d) flat = flat * s[d] + idx[d];
  return flat;
}

// For each element of `out` (row-major), the flat input index it comes from.
std::vector<double> reference(const Shape& out, const std::function<int64_t(const Index&)>& source) {
  std::vector<double> v;
  for (int64_t i = 0; i < out.size(); ++i) v.push_back(static_cast<double>(source(unravel(i, out))));
  return v;
}

// ---- pure shape rules: MXNet's documented Reshape examples

Shape reshape_of(const Shape& in, const IntTuple& spec, bool reverse = false) {
  return infer_reshape(in, spec, reverse);
}

TEST(InferReshape, MxnetDocumentedExamples) {
  Shape s{2, 3, 4};
  EXPECT_EQ(reshape_of(s, {4, 0, 2}), (Shape{4, 3, 2}));
  EXPECT_EQ(reshape_of(s, {2, 0, 0}), (Shape{2, 3, 4}));
  EXPECT_EQ(reshape_of(s, {6, 1, -1}), (Shape{6, 1, 4}));
  EXPECT_EQ(reshape_of(s, {3, -1, 8}), (Shape{3, 1, 8}));
  EXPECT_EQ(reshape_of(s, {-1}), (Shape{24}));
  EXPECT_EQ(reshape_of(s, {2, -1}), (Shape{2, 12}));
  EXPECT_EQ(reshape_of(s, {-2}), (Shape{2, 3, 4}));
  EXPECT_EQ(reshape_of(s, {2, -2}), (Shape{2, 3, 4}));
  EXPECT_EQ(reshape_of(s, {-2, 1, 1}), (Shape{2, 3, 4, 1, 1}));
  EXPECT_EQ(reshape_of(s, {-3, 4}), (Shape{6, 4}));
  EXPECT_EQ(reshape_of(Shape{2, 3, 4, 5}, {-3, -3}), (Shape{6, 20}));
  EXPECT_EQ(reshape_of(s, {0, -3}), (Shape{2, 12}));
  EXPECT_EQ(reshape_of(s, {-3, -2}), (Shape{6, 4}));
  EXPECT_EQ(reshape_of(s, {-4, 1, 2, -2}), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(reshape_of(s, {2, -4, -1, 3, -2}), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(reshape_of(Shape{6}, {-4, -1, 2}), (Shape{3, 2}));
  EXPECT_EQ(reshape_of(Shape{1}, {}), (Shape{}));
  EXPECT_EQ(reshape_of(Shape{0, 3}, {-1, 0}), (Shape{0, 3}));
}

TEST(InferReshape, ReverseMatchesFromTheRight) {
  EXPECT_EQ(reshape_of(Shape{10, 5, 4}, {-1, 0}), (Shape{40, 5}));
  EXPECT_EQ(reshape_of(Shape{10, 5, 4}, {-1, 0}, true), (Shape{50, 4}));
  EXPECT_EQ(reshape_of(Shape{2, 3, 4}, {0, -1}, true), (Shape{3, 8}));  // 0 copies 3, -1 stands for 4
  EXPECT_EQ(reshape_of(Shape{2, 3, 4}, {0, -1}), (Shape{2, 12}));
  EXPECT_EQ(reshape_of(Shape{2, 3, 4}, {-2, 0}, true), (Shape{2, 3, 4}));
  EXPECT_EQ(reshape_of(Shape{2, 3, 4}, {-3, 0}, true), (Shape{6, 4}));
  // -4 splits the rightmost dim it reaches: 4 into (1, 4); -1 takes the rest.
  EXPECT_EQ(reshape_of(Shape{2, 3, 4}, {-1, -4, 1, 4}, true), (Shape{6, 1, 4}));
  EXPECT_THROW(reshape_of(Shape{2, 3, 4}, {-1, -4, 1, 4}), ShapeError);  // left to right: 3 is not 1*4
}

TEST(InferReshape, ErrorsNameBothShapes) {
  try {
    reshape_of(Shape{2, 3, 4}, {5, 5});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[2,3,4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[5,5]"), std::string::npos) << m;
  }
  EXPECT_THROW(reshape_of(Shape{2, 3, 4}, {-1, 5}), ShapeError);  // 24 not a multiple of 5
  EXPECT_THROW(reshape_of(Shape{2, 3}, {0, 0, 0}), ShapeError);   // 0 past the input's axes
  EXPECT_THROW(reshape_of(Shape{2, 3}, {2, -3}), ShapeError);     // -3 needs two dims
  EXPECT_THROW(reshape_of(Shape{2, 3, 4}, {-4, 5, -1, -2}), ShapeError);
  EXPECT_THROW(reshape_of(Shape{2, 3, 4}, {-1, -1}), ValueError);
  EXPECT_THROW(reshape_of(Shape{2, 3, 4}, {-4, -1, -1, -2}), ValueError);
  EXPECT_THROW(reshape_of(Shape{2, 3, 4}, {-4, 2}), ValueError);
  EXPECT_THROW(reshape_of(Shape{2, 3, 4}, {-5, 2}), ValueError);
  EXPECT_THROW(reshape_of(Shape{0, 3}, {0, -1}), ShapeError);  // -1 ambiguous for size 0 (as NumPy)
}

TEST(SliceRange, PythonSemantics) {
  struct Case {
    int64_t len;
    std::optional<int64_t> b, e, s;
    Index expected;  // the indices Python's range(*slice(b, e, s).indices(len)) yields
  };
  const std::vector<Case> cases = {
      {6, std::nullopt, std::nullopt, std::nullopt, {0, 1, 2, 3, 4, 5}},
      {6, 1, 4, std::nullopt, {1, 2, 3}},
      {6, -2, std::nullopt, std::nullopt, {4, 5}},
      {6, std::nullopt, -4, std::nullopt, {0, 1}},
      {6, std::nullopt, std::nullopt, 2, {0, 2, 4}},
      {6, std::nullopt, std::nullopt, -1, {5, 4, 3, 2, 1, 0}},
      {6, std::nullopt, std::nullopt, -2, {5, 3, 1}},
      {6, 4, 0, -2, {4, 2}},
      {6, 4, 4, 1, {}},
      {6, 100, -100, -3, {5, 2}},
      {6, -100, 100, 4, {0, 4}},
      {6, 2, 1, std::nullopt, {}},
      {0, std::nullopt, std::nullopt, -1, {}},
  };
  for (const auto& c : cases) {
    SliceRange r = slice_range(c.len, c.b, c.e, c.s);
    Index got;
    for (int64_t k = 0; k < r.length; ++k) got.push_back(r.begin + k * r.step);
    EXPECT_EQ(got, c.expected) << "len " << c.len << " begin " << c.b.value_or(-999) << " end " << c.e.value_or(-999)
                               << " step " << c.s.value_or(-999);
  }
  EXPECT_THROW(slice_range(6, 0, 1, 0), ValueError);
}

// ---- attributes: MXNet's string forms and the aliases

TEST(MatrixAttrs, ParseAndPrintMxnetStrings) {
  const OpDef* slice = find_op("slice");
  ASSERT_NE(slice, nullptr);
  OpAttrs a = slice->parse_attrs("slice", {{"begin", "(0, None)"}, {"end", "[None,-1]"}, {"step", "(None, -2)"}});
  EXPECT_EQ(a.as<SliceAttrs>().begin, (OptIntTuple{0, std::nullopt}));
  EXPECT_EQ(a.as<SliceAttrs>().end, (OptIntTuple{std::nullopt, -1}));
  EXPECT_EQ(a.to_strings().at("step"), "(None, -2)");
  EXPECT_EQ(print_attr(OptIntTuple{3}), "(3,)");
  EXPECT_EQ(parse_attr("(3,)", static_cast<OptIntTuple*>(nullptr)), (OptIntTuple{3}));
  EXPECT_EQ(parse_attr("()", static_cast<OptIntTuple*>(nullptr)), OptIntTuple{});
  EXPECT_THROW(parse_attr("(1, x)", static_cast<OptIntTuple*>(nullptr)), ValueError);

  EXPECT_EQ(find_op("reshape"), &op_def(OpId::kReshape));
  EXPECT_EQ(find_op("concat"), &op_def(OpId::kConcat));
  EXPECT_EQ(find_op("split"), &op_def(OpId::kSplit));
  OpAttrs r = find_op("Reshape")->parse_attrs("Reshape", {{"shape", "(-1, 0)"}, {"reverse", "True"}});
  EXPECT_EQ(r.as<ReshapeAttrs>().shape, (IntTuple{-1, 0}));
  EXPECT_TRUE(r.as<ReshapeAttrs>().reverse);
  OpAttrs t = find_op("take")->parse_attrs("take", {{"mode", "wrap"}});
  EXPECT_EQ(t.as<TakeAttrs>().mode, TakeMode::kWrap);
  EXPECT_EQ(t.to_strings().at("mode"), "wrap");
  EXPECT_THROW(find_op("take")->parse_attrs("take", {{"mode", "fold"}}), ValueError);
  EXPECT_THROW(find_op("one_hot")->parse_attrs("one_hot", {}), ValueError);  // depth is required
  EXPECT_FALSE(op_def(OpId::kOneHot).differentiable);
  EXPECT_EQ(op_def(OpId::kConcat).num_inputs, -1);
  EXPECT_EQ(op_def(OpId::kTake).input_names, (std::vector<std::string_view>{"a", "indices"}));
}

TEST(MatrixAttrs, EveryOpHasInferenceAndCpuKernel) {
  for (OpId id : {OpId::kReshape, OpId::kTranspose, OpId::kSlice, OpId::kSliceAxis, OpId::kConcat, OpId::kStack,
                  OpId::kSplit, OpId::kTake, OpId::kOneHot, OpId::kExpandDims, OpId::kBroadcastTo}) {
    const OpDef& d = op_def(id);
    EXPECT_NE(d.infer, nullptr) << d.name;
    EXPECT_NE(d.parse_attrs, nullptr) << d.name;
    EXPECT_FALSE(d.doc.empty()) << d.name;
    EXPECT_TRUE(has_kernel(id, DeviceKind::kCPU)) << d.name;
  }
}

TEST(MatrixAttrs, LegacyTargetShape) {
  const OpDef& d = op_def(OpId::kReshape);
  std::vector<TensorType> out;
  infer_types(d, d.parse_attrs("Reshape", {{"target_shape", "(0, 4)"}}), std::vector<TensorType>{{Shape{2, 3, 4}}},
              out);
  EXPECT_EQ(out[0].shape, (Shape{6, 4}));
  infer_types(d, d.parse_attrs("Reshape", {{"target_shape", "(0, 0)"}, {"keep_highest", "True"}}),
              std::vector<TensorType>{{Shape{2, 3, 4}}}, out);
  EXPECT_EQ(out[0].shape, (Shape{2, 12}));
}

// ---- ops on devices and dtypes

struct Param {
  int device;
  DType dtype;
};

std::string param_name(const ::testing::TestParamInfo<Param>& p) {
  return fmt::format("cpu{}_{}", p.param.device, dtype_name(p.param.dtype));
}

class MatrixOp : public ::testing::TestWithParam<Param> {
 protected:
  Device dev() const { return Device::cpu(GetParam().device); }
  DType dtype() const { return GetParam().dtype; }
  // Element i holds i. Shapes stay under 128 elements so every dtype holds them exactly.
  NDArray iota(const Shape& s) const {
    return nd::arange(0, static_cast<double>(s.size()), 1, {.dtype = dtype(), .device = dev()}).reshape(s.to_vector());
  }
  void expect(const NDArray& y, const Shape& shape, const std::vector<double>& values) const {
    EXPECT_EQ(y.shape(), shape);
    EXPECT_EQ(y.dtype(), dtype());
    EXPECT_EQ(y.device(), dev());
    EXPECT_EQ(y.to_vector<double>(), values);
  }
};

TEST_P(MatrixOp, Reshape) {
  auto x = iota({2, 3, 4});
  std::vector<double> same = reference(Shape{24}, [](const Index& i) { return i[0]; });
  expect(nd::reshape(x, {4, 0, 2}), {4, 3, 2}, same);
  expect(nd::reshape(x, {-4, 1, 2, -2}), {1, 2, 3, 4}, same);
  expect(nd::reshape(x, {-1, 0}, true), {6, 4}, same);
  expect(nd::reshape(x, {-3, -2}), {6, 4}, same);
  EXPECT_THROW(nd::reshape(x, {5, 5}), ShapeError);
  // The view and the op follow the same rules.
  EXPECT_EQ(x.reshape({2, -4, -1, 3, -2}).shape(), nd::reshape(x, {2, -4, -1, 3, -2}).shape());
}

TEST_P(MatrixOp, Transpose) {
  struct Case {
    Shape in;
    IntTuple axes;
  };
  for (const Case& c : std::vector<Case>{{{3, 5}, {}},
                                         {{3, 5}, {1, 0}},
                                         {{2, 3, 4}, {1, 2, 0}},
                                         {{2, 3, 4}, {-1, 0, -2}},
                                         {{2, 3, 4}, {}},
                                         {{2, 1, 3, 2}, {3, 0, 2, 1}},
                                         {{4, 4}, {0, 1}},
                                         {{9, 12}, {}},  // tiled path, partial tiles, every unit size
                                         {{2, 8, 9}, {2, 1, 0}},
                                         {{7}, {}}}) {
    int n = c.in.ndim();
    std::vector<int> perm(n);
    for (int k = 0; k < n; ++k) perm[k] = c.axes.empty() ? n - 1 - k : static_cast<int>((c.axes[k] + n) % n);
    Shape out;
    for (int k = 0; k < n; ++k) out.push_back(c.in[perm[k]]);
    auto expected = reference(out, [&](const Index& o) {
      Index i(n);
      for (int k = 0; k < n; ++k) i[perm[k]] = o[k];
      return ravel(i, c.in);
    });
    expect(nd::transpose(iota(c.in), c.axes), out, expected);
  }
  auto x = iota({2, 3});
  EXPECT_THROW(nd::transpose(x, {0}), ValueError);
  EXPECT_THROW(nd::transpose(x, {0, 2}), IndexError);
  EXPECT_THROW(nd::transpose(x, {1, -1}), ValueError);
}

TEST_P(MatrixOp, Slice) {
  Shape in{4, 5, 6};
  auto x = iota(in);
  struct Case {
    OptIntTuple begin, end, step;
    std::vector<Index> picks;  // per leading axis, the input indices kept (hand computed)
  };
  const std::vector<Case> cases = {
      {{1, std::nullopt}, {3, std::nullopt}, {}, {{1, 2}, {0, 1, 2, 3, 4}}},
      {{std::nullopt, std::nullopt, std::nullopt},
       {std::nullopt, std::nullopt, std::nullopt},
       {-1, -2, -1},
       {{3, 2, 1, 0}, {4, 2, 0}, {5, 4, 3, 2, 1, 0}}},
      {{-1, 4, 1}, {0, 0, -1}, {-2, -3, 2}, {{3, 1}, {4, 1}, {1, 3}}},
      {{-3}, {100}, {}, {{1, 2, 3}}},
      {{0, 2}, {4, 2}, {}, {{0, 1, 2, 3}, {}}},
  };
  for (const Case& c : cases) {
    Shape out;
    for (int d = 0; d < in.ndim(); ++d)
      out.push_back(d < static_cast<int>(c.picks.size()) ? static_cast<int64_t>(c.picks[d].size()) : in[d]);
    auto expected = reference(out, [&](const Index& o) {
      Index i = o;
      for (size_t d = 0; d < c.picks.size(); ++d) i[d] = c.picks[d][o[d]];
      return ravel(i, in);
    });
    expect(nd::slice(x, c.begin, c.end, c.step), out, expected);
  }
  EXPECT_THROW(nd::slice(x, {0, 0, 0, 0}, {1, 1, 1, 1}), IndexError);
  EXPECT_THROW(nd::slice(x, {0}, {1, 2}), ValueError);
  EXPECT_THROW(nd::slice(x, {0}, {1}, {0}), ValueError);
}

TEST_P(MatrixOp, SliceAxis) {
  Shape in{3, 4, 5};
  auto x = iota(in);
  auto y = nd::slice_axis(x, -1, -3, std::nullopt);  // last axis, elements 2..4
  expect(y, {3, 4, 3}, reference({3, 4, 3}, [&](const Index& o) { return ravel({o[0], o[1], o[2] + 2}, in); }));
  y = nd::slice_axis(x, 1, 1, 3);
  expect(y, {3, 2, 5}, reference({3, 2, 5}, [&](const Index& o) { return ravel({o[0], o[1] + 1, o[2]}, in); }));
  y = nd::slice_axis(x, 0, -1, -1);  // empty, as Python's x[-1:-1]
  EXPECT_EQ(y.shape(), (Shape{0, 4, 5}));
  EXPECT_THROW(nd::slice_axis(x, 3, 0, 1), IndexError);
}

TEST_P(MatrixOp, Concat) {
  Shape a{2, 3, 2}, b{2, 1, 2}, c{2, 4, 2};
  auto xa = iota(a), xb = iota(b), xc = iota(c);
  auto expected = reference({2, 8, 2}, [&](const Index& o) -> int64_t {
    if (o[1] < 3) return ravel(o, a);
    if (o[1] < 4) return ravel({o[0], o[1] - 3, o[2]}, b);
    return ravel({o[0], o[1] - 4, o[2]}, c);
  });
  expect(nd::concat({xa, xb, xc}, 1), {2, 8, 2}, expected);

  auto z = nd::concat({xa, xa}, -1);
  expect(z, {2, 3, 4}, reference({2, 3, 4}, [&](const Index& o) { return ravel({o[0], o[1], o[2] % 2}, a); }));
  expect(nd::concat({xa}, 0), a, reference(a, [&](const Index& o) { return ravel(o, a); }));
  try {
    nd::concat({xa, iota({3, 3, 2})}, 1);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("Concat"), std::string::npos) << m;
    EXPECT_NE(m.find("input 1"), std::string::npos) << m;
    EXPECT_NE(m.find("[3,3,2]"), std::string::npos) << m;
    EXPECT_NE(m.find("[2,3,2]"), std::string::npos) << m;
  }
  EXPECT_THROW(nd::concat({xa, xb}, 3), IndexError);
  EXPECT_THROW(nd::concat({xa, iota({2, 3})}, 0), ShapeError);
  std::vector<NDArray> two{xa, xa};
  EXPECT_THROW(invoke1(OpId::kConcat, std::span<const NDArray>(two), OpAttrs::make(ConcatAttrs{.num_args = 3})),
               ValueError);
}

TEST_P(MatrixOp, Stack) {
  Shape s{2, 3};
  auto x = iota(s);
  auto x2 = nd::slice(iota({2, 6}), {std::nullopt, 3}, {std::nullopt, std::nullopt});  // values 3,4,5,9,10,11
  std::vector<std::pair<int, Shape>> cases = {{0, {2, 2, 3}}, {1, {2, 2, 3}}, {-1, {2, 3, 2}}, {2, {2, 3, 2}}};
  for (auto [axis, out] : cases) {
    int ax = axis < 0 ? axis + 3 : axis;
    auto expected = reference(out, [&](const Index& o) -> int64_t {
      Index i;
      for (int d = 0; d < 3; ++d)
        if (d != ax) i.push_back(o[d]);
      return o[ax] == 0 ? ravel(i, s) : i[0] * 6 + 3 + i[1];
    });
    expect(nd::stack({x, x2}, axis), out, expected);
  }
  EXPECT_THROW(nd::stack({x, iota({3, 2})}, 0), ShapeError);
  EXPECT_THROW(nd::stack({x, x}, 3), IndexError);
}

TEST_P(MatrixOp, Split) {
  Shape in{2, 6, 3};
  auto x = iota(in);
  auto parts = nd::split(x, 3, 1);
  ASSERT_EQ(parts.size(), 3u);
  for (int k = 0; k < 3; ++k)
    expect(parts[k], {2, 2, 3}, reference({2, 2, 3}, [&](const Index& o) {
             return ravel({o[0], o[1] + 2 * k, o[2]}, in);
           }));
  auto rows = nd::split(x, 2, 0, true);
  ASSERT_EQ(rows.size(), 2u);
  for (int k = 0; k < 2; ++k)
    expect(rows[k], {6, 3}, reference({6, 3}, [&](const Index& o) { return ravel({k, o[0], o[1]}, in); }));
  auto cols = nd::split(x, 3, -1, true);
  for (int k = 0; k < 3; ++k)
    expect(cols[k], {2, 6}, reference({2, 6}, [&](const Index& o) { return ravel({o[0], o[1], k}, in); }));
  EXPECT_THROW(nd::split(x, 4, 1), ValueError);
  EXPECT_THROW(nd::split(x, 3, 1, true), ValueError);
  EXPECT_THROW(nd::split(x, 2, 3), IndexError);
}

TEST_P(MatrixOp, Take) {
  Shape in{4, 3, 2};
  auto x = iota(in);
  Index raw = {0, 3, -1, 5, 2, -6};
  auto check = [&](DType index_dtype, int axis, TakeMode mode) {
    int ax = axis < 0 ? axis + 3 : axis;
    int64_t n = in[ax];
    NDArray idx;
    switch (index_dtype) {
      case DType::kInt64:
        idx = nd::array(raw, {2, 3}, dev());
        break;
      case DType::kInt32:
        idx = nd::array(std::vector<int32_t>(raw.begin(), raw.end()), {2, 3}, dev());
        break;
      case DType::kFloat64:
        idx = nd::array(std::vector<double>(raw.begin(), raw.end()), {2, 3}, dev());
        break;
      default:  // fractions truncate toward zero, to raw
        idx = nd::array(std::vector<float>{0.2f, 3.9f, -1.5f, 5, 2.7f, -6}, {2, 3}, dev());
    }
    auto fix = [&](int64_t i) {
      if (mode == TakeMode::kClip) return std::clamp<int64_t>(i, 0, n - 1);
      return ((i % n) + n) % n;
    };
    Shape out;
    for (int d = 0; d < ax; ++d) out.push_back(in[d]);
    out.push_back(2);
    out.push_back(3);
    for (int d = ax + 1; d < 3; ++d) out.push_back(in[d]);
    auto expected = reference(out, [&](const Index& o) {
      Index i;
      for (int d = 0; d < ax; ++d) i.push_back(o[d]);
      i.push_back(fix(raw[o[ax] * 3 + o[ax + 1]]));
      for (int d = ax + 1; d < 3; ++d) i.push_back(o[d + 1]);
      return ravel(i, in);
    });
    SCOPED_TRACE(fmt::format("indices {} axis {} mode {}", index_dtype, axis, print_attr(mode)));
    expect(nd::take(x, idx, axis, mode), out, expected);
  };
  for (DType t : {DType::kInt32, DType::kInt64, DType::kFloat32, DType::kFloat64})
    for (int axis : {0, 1, -1})
      for (TakeMode mode : {TakeMode::kClip, TakeMode::kWrap}) check(t, axis, mode);

  // raise: negative indices count from the end; out of range fails at the read.
  auto ok = nd::take(x, nd::array(std::vector<int32_t>{-1, 1}, dev()), 0, TakeMode::kRaise);
  expect(ok, {2, 3, 2}, reference({2, 3, 2}, [&](const Index& o) {
           return ravel({o[0] == 0 ? 3 : 1, o[1], o[2]}, in);
         }));
  auto bad = nd::take(x, nd::array(std::vector<int32_t>{0, 4}, dev()), 0, TakeMode::kRaise);
  EXPECT_THROW(bad.to_vector<double>(), IndexError);
  EXPECT_THROW(nd::take(x, nd::array(std::vector<int32_t>{0}, dev()), 3), IndexError);
  EXPECT_THROW(nd::take(iota({0, 2}), nd::array(std::vector<int32_t>{0}, dev())), IndexError);
}

TEST_P(MatrixOp, OneHot) {
  auto idx = nd::array(std::vector<int32_t>{0, 2, -1, 3, 1, 7}, {2, 3}, dev());
  auto y = nd::one_hot(idx, 4, 5, 2, dtype());
  std::vector<double> expected;
  for (int32_t i : {0, 2, -1, 3, 1, 7})
    for (int j = 0; j < 4; ++j) expected.push_back(i == j ? 5 : 2);
  expect(y, {2, 3, 4}, expected);
  auto neg = nd::one_hot(nd::array(std::vector<int64_t>{2, 0}, dev()), 3, -1.5, 0.25, DType::kFloat64);
  EXPECT_EQ(neg.to_vector<double>(), (std::vector<double>{0.25, 0.25, -1.5, -1.5, 0.25, 0.25}));
  auto f = nd::one_hot(nd::array(std::vector<float>{1.9f}, dev()), 3);
  EXPECT_EQ(f.dtype(), DType::kFloat32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{0, 1, 0}));
}

TEST_P(MatrixOp, ExpandDims) {
  auto x = iota({2, 3});
  auto same = reference({6}, [](const Index& i) { return i[0]; });
  expect(nd::expand_dims(x, 0), {1, 2, 3}, same);
  expect(nd::expand_dims(x, 1), {2, 1, 3}, same);
  expect(nd::expand_dims(x, -1), {2, 3, 1}, same);
  expect(nd::expand_dims(x, -3), {1, 2, 3}, same);
  EXPECT_THROW(nd::expand_dims(x, 3), IndexError);
  EXPECT_THROW(nd::expand_dims(x, -4), IndexError);
}

TEST_P(MatrixOp, BroadcastTo) {
  auto col = iota({3, 1});
  expect(nd::broadcast_to(col, {3, 4}), {3, 4}, reference({3, 4}, [](const Index& o) { return o[0]; }));
  expect(nd::broadcast_to(col, {0, 5}), {3, 5}, reference({3, 5}, [](const Index& o) { return o[0]; }));
  auto row = iota({4});
  expect(nd::broadcast_to(row, {2, 3, 4}), {2, 3, 4}, reference({2, 3, 4}, [](const Index& o) { return o[2]; }));
  auto mid = iota({2, 1, 3});
  expect(nd::broadcast_to(mid, {2, 4, 3}), {2, 4, 3},
         reference({2, 4, 3}, [](const Index& o) { return o[0] * 3 + o[2]; }));
  EXPECT_THROW(nd::broadcast_to(col, {3, 4, 2}), ShapeError);
  EXPECT_THROW(nd::broadcast_to(iota({2, 3}), {3}), ShapeError);
}

INSTANTIATE_TEST_SUITE_P(Devices, MatrixOp,
                         ::testing::Values(Param{0, DType::kFloat32}, Param{1, DType::kFloat32},
                                           Param{0, DType::kInt32}, Param{1, DType::kInt32}, Param{0, DType::kFloat16},
                                           Param{1, DType::kFloat64}, Param{0, DType::kUint8}),
                         param_name);

// ---- large arrays: the tiled and parallel paths

class MatrixLarge : public ::testing::TestWithParam<int> {
 protected:
  Device dev() const { return Device::cpu(GetParam()); }
  NDArray iota(const Shape& s, DType t = DType::kInt32) const {
    return nd::arange(0, static_cast<double>(s.size()), 1, {.dtype = t, .device = dev()}).reshape(s.to_vector());
  }
};

TEST_P(MatrixLarge, TransposeConcatSplitTake) {
  Shape in{301, 517};
  auto x = iota(in);
  auto t = nd::transpose(x);
  auto expected_t = reference({517, 301}, [&](const Index& o) { return ravel({o[1], o[0]}, in); });
  EXPECT_EQ(t.to_vector<double>(), expected_t);

  Shape in3{37, 64, 45};
  auto x3 = iota(in3, DType::kFloat64);
  auto t3 = nd::transpose(x3, {2, 0, 1});
  EXPECT_EQ(t3.to_vector<double>(), reference({45, 37, 64}, [&](const Index& o) {
              return ravel({o[1], o[2], o[0]}, in3);
            }));

  auto c = nd::concat({x, x}, 0);
  EXPECT_EQ(c.to_vector<double>(), reference({602, 517}, [&](const Index& o) {
              return ravel({o[0] % 301, o[1]}, in);
            }));
  auto parts = nd::split(c, 2, 0);
  EXPECT_EQ(parts[1].to_vector<double>(), reference(in, [&](const Index& o) { return ravel(o, in); }));

  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 1000; ++i) ids.push_back((i * 7919) % 301);
  auto g = nd::take(x, nd::array(ids, dev()));
  EXPECT_EQ(g.to_vector<double>(), reference({1000, 517}, [&](const Index& o) {
              return ravel({ids[o[0]], o[1]}, in);
            }));
  auto b = nd::broadcast_to(iota({1, 517}), {400, 517});
  EXPECT_EQ(b.to_vector<double>(), reference({400, 517}, [](const Index& o) { return o[1]; }));
  auto r = nd::slice(x, {std::nullopt, std::nullopt}, {std::nullopt, std::nullopt}, {-1, -3});
  EXPECT_EQ(r.to_vector<double>(), reference({301, 173}, [&](const Index& o) {
              return ravel({300 - o[0], 516 - 3 * o[1]}, in);
            }));
}

INSTANTIATE_TEST_SUITE_P(Devices, MatrixLarge, ::testing::Values(0, 1));

// strided_copy directly: 2-byte elements, negative and zero source strides.
TEST(StridedCopy, TwoByteUnitsAndOddStrides) {
  std::vector<uint16_t> src(6 * 40);
  std::iota(src.begin(), src.end(), uint16_t{0});
  std::vector<uint16_t> dst(40 * 6 * 2, 0xFFFF);
  cpu::StridedLayout l;  // dst[j][i][k] = src[5 - i][j] for k in {0, 1}
  l.push(40, 12, 1);
  l.push(6, 2, -40);
  l.push(2, 1, 0);
  cpu::strided_copy(2, sizeof(uint16_t), dst.data(), src.data() + 5 * 40, l);
  for (int j = 0; j < 40; ++j)
    for (int i = 0; i < 6; ++i)
      for (int k = 0; k < 2; ++k) ASSERT_EQ(dst[j * 12 + i * 2 + k], src[(5 - i) * 40 + j]) << j << " " << i;
}

}  // namespace
}  // namespace kiln
