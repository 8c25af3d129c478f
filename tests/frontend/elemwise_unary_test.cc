// Unary elemwise ops, clip, _copy, Cast and where against references computed
// here, on cpu(0) and cpu(1), including the vectorized float32 math.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/ops/elemwise.h"
#include "tests/frontend/elemwise_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct UnaryCase {
  OpId op;
  double (*ref)(double);
  bool floating_only;
  double lo, hi;  // test domain
};

const UnaryCase kUnaryCases[] = {
    {OpId::kExp, [](double x) { return std::exp(x); }, true, -20, 20},
    {OpId::kLog, [](double x) { return std::log(x); }, true, 0.001, 1000},
    {OpId::kSqrt, [](double x) { return std::sqrt(x); }, true, 0, 1000},
    {OpId::kTanh, [](double x) { return std::tanh(x); }, true, -6, 6},
    {OpId::kErf, [](double x) { return std::erf(x); }, true, -4, 4},
    {OpId::kSigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, true, -30, 30},
    {OpId::kSin, [](double x) { return std::sin(x); }, true, -10, 10},
    {OpId::kCos, [](double x) { return std::cos(x); }, true, -10, 10},
    {OpId::kTan, [](double x) { return std::tan(x); }, true, -1.5, 1.5},
    {OpId::kArcsin, [](double x) { return std::asin(x); }, true, -1, 1},
    {OpId::kArccos, [](double x) { return std::acos(x); }, true, -1, 1},
    {OpId::kArctan, [](double x) { return std::atan(x); }, true, -20, 20},
    {OpId::kSinh, [](double x) { return std::sinh(x); }, true, -5, 5},
    {OpId::kCosh, [](double x) { return std::cosh(x); }, true, -5, 5},
    {OpId::kArcsinh, [](double x) { return std::asinh(x); }, true, -20, 20},
    {OpId::kArccosh, [](double x) { return std::acosh(x); }, true, 1, 20},
    {OpId::kArctanh, [](double x) { return std::atanh(x); }, true, -0.99, 0.99},
    {OpId::kRound, [](double x) { return std::round(x); }, true, -10, 10},
    {OpId::kRint, [](double x) { return std::nearbyint(x); }, true, -10, 10},
    {OpId::kCeil, [](double x) { return std::ceil(x); }, true, -10, 10},
    {OpId::kFloor, [](double x) { return std::floor(x); }, true, -10, 10},
    {OpId::kSign, [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : x); }, false, -100, 100},
    {OpId::kSquare, [](double x) { return x * x; }, false, -11, 11},
    {OpId::kRelu, [](double x) { return x > 0 ? x : 0; }, false, -100, 100},
    {OpId::kAbs, [](double x) { return std::fabs(x); }, false, -100, 100},
    {OpId::kNegative, [](double x) { return -x; }, false, -100, 100},
};

void check_unary(const UnaryCase& c, DType t, int64_t n, Device d) {
  bool integral = is_integral(t);
  double lo = t == DType::kUint8 ? 0 : c.lo;
  std::vector<double> x = uniform_values(n, lo, c.hi, integral ? 1 : 0, 11);
  if (!integral) {  // values as stored in t
    x = make_array(x, {n}, t).to_vector<double>();
  }
  std::string what = fmt::format("{}({}[{}]) on {}", op_def(c.op).name, dtype_short_name(t), n, d);
  NDArray out = invoke1(c.op, {make_array(x, {n}, t, d)});
  ASSERT_EQ(out.dtype(), t) << what;
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = wrap_to(t, c.ref(x[i]));
  if (t == DType::kFloat16 || t == DType::kBfloat16) want = make_array(want, {n}, t).to_vector<double>();  // overflow
  expect_all_near(out.to_vector<double>(), want, tolerance(t), what);
}

TEST(ElemwiseUnary, EveryOpDtypeAndDevice) {
  for (Device d : kDevices)
    for (const UnaryCase& c : kUnaryCases) {
      for (DType t : {DType::kFloat32, DType::kFloat64}) check_unary(c, t, 37, d);
      if (c.floating_only) continue;
      for (DType t : {DType::kInt32, DType::kInt64, DType::kInt8, DType::kUint8}) check_unary(c, t, 37, d);
    }
}

TEST(ElemwiseUnary, HalfPrecisionAndEmptyAndLargeArrays) {
  for (const UnaryCase& c : kUnaryCases) {
    check_unary(c, DType::kFloat16, 20, Device::cpu(0));
    check_unary(c, DType::kBfloat16, 20, Device::cpu(1));
    check_unary(c, DType::kFloat32, 0, Device::cpu(0));
    check_unary(c, DType::kFloat32, (1 << 20) + 3, Device::cpu(1));
  }
}

// The spacing of float32 values at finite `v` (2^-149 among subnormals).
double float_ulp(double v) {
  return std::max(std::ldexp(1.0, std::ilogb(std::max(std::fabs(v), 1.2e-38)) - 23), 1.4e-45);
}

// The float32 exp/log/tanh/sigmoid/sqrt are polynomial approximations: check
// them within 4 ulp of double-precision libm over a dense sweep, and their
// special values exactly.
TEST(ElemwiseUnary, Float32MathIsAccurateAndKeepsSpecialValues) {
  std::vector<double> sweep;
  for (double x = -110; x < 110; x += 0.0137) sweep.push_back(static_cast<float>(x));
  for (double x = 1e-30; x < 1e30; x *= 1.37) sweep.push_back(static_cast<float>(x));
  for (float f : {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-40f, 0.625f, -0.625f, 88.7f, 88.8f, -87.4f, -103.9f})
    sweep.push_back(f);
  for (double special : {kInf, -kInf, kNaN}) sweep.push_back(special);
  const int64_t n = static_cast<int64_t>(sweep.size());
  NDArray x = make_array(sweep, {n}, DType::kFloat32);
  for (const UnaryCase& c : kUnaryCases) {
    if (!c.floating_only) continue;
    std::vector<double> got = invoke1(c.op, {x}).to_vector<double>();
    for (size_t i = 0; i < sweep.size(); ++i) {
      double want = static_cast<float>(c.ref(sweep[i]));
      // Infinities and NaNs are matched exactly (they have no ulp: ilogb(NaN) is INT_MIN).
      bool ok = std::isfinite(want) ? got[i] == want || std::fabs(got[i] - want) <= 4 * float_ulp(want)
                                    : (std::isnan(want) ? std::isnan(got[i]) : got[i] == want);
      if (!ok) {
        ADD_FAILURE() << op_def(c.op).name << "(" << sweep[i] << ") = " << got[i] << ", expected " << want;
        break;
      }
    }
  }
}

TEST(ElemwiseUnary, FloatingOpsRejectIntegerInputs) {
  for (const UnaryCase& c : kUnaryCases) {
    if (!c.floating_only) continue;
    for (DType t : {DType::kInt32, DType::kUint8, DType::kInt64})
      EXPECT_THROW(invoke1(c.op, {nd::zeros({2}, {.dtype = t})}), TypeError)
          << op_def(c.op).name << " " << dtype_name(t);
  }
}

// Halves: round goes away from zero, rint to even; ceil/floor/sign keep -0
// and NaN; sign keeps +-0.
TEST(ElemwiseUnary, RoundingAndSignAtHalvesZerosAndNaN) {
  for (Device d : kDevices)
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBfloat16}) {
      NDArray x = make_array({0.5, 1.5, 2.5, -0.5, -2.5, -0.0, kNaN, kInf, -1.25}, {9}, t, d);
      std::string what = fmt::format("{} on {}", t, d);
      expect_all_near(nd::round(x).to_vector<double>(), {1, 2, 3, -1, -3, -0.0, kNaN, kInf, -1}, 0, "round " + what);
      expect_all_near(nd::rint(x).to_vector<double>(), {0, 2, 2, -0.0, -2, -0.0, kNaN, kInf, -1}, 0, "rint " + what);
      expect_all_near(nd::ceil(x).to_vector<double>(), {1, 2, 3, -0.0, -2, -0.0, kNaN, kInf, -1}, 0, "ceil " + what);
      expect_all_near(nd::floor(x).to_vector<double>(), {0, 1, 2, -1, -3, -0.0, kNaN, kInf, -2}, 0, "floor " + what);
      std::vector<double> s = nd::sign(x).to_vector<double>();
      expect_all_near(s, {1, 1, 1, -1, -1, -0.0, kNaN, 1, -1}, 0, "sign " + what);
      EXPECT_TRUE(std::signbit(s[5])) << "sign(-0) " << what;
      EXPECT_TRUE(std::signbit(nd::rint(x).to_vector<double>()[3])) << "rint(-0.5) " << what;
    }
}

TEST(ElemwiseUnary, Clip) {
  for (Device d : kDevices) {
    std::vector<double> v = {-5, -1.5, -1, 0, 1, 2, 2.5, 3, 9};
    expect_all_near(nd::clip(make_array(v, {9}, DType::kFloat32, d), -1.5, 2.5).to_vector<double>(),
                    {-1.5, -1.5, -1, 0, 1, 2, 2.5, 2.5, 2.5}, 0, "clip f32");
    // Integer bounds truncate: [-1, 2].
    expect_all_near(nd::clip(make_array(v, {9}, DType::kInt32, d), -1.5, 2.5).to_vector<double>(),
                    {-1, -1, -1, 0, 1, 2, 2, 2, 2}, 0, "clip i32");
    expect_all_near(nd::clip(make_array({0, 1, 7, 255}, {4}, DType::kUint8, d), -3, 300).to_vector<double>(),
                    {0, 1, 7, 255}, 0, "clip u8 with saturated bounds");
  }
  expect_all_near(nd::clip(make_array({kNaN, 1}, {2}, DType::kFloat32), 0, 0.5).to_vector<double>(), {kNaN, 0.5}, 0,
                  "clip keeps NaN");
  std::vector<double> big = uniform_values((1 << 20) + 1, -3, 3, 0, 2), want;
  for (double b : big) want.push_back(std::min(std::max(static_cast<double>(static_cast<float>(b)), -1.0), 1.0));
  expect_all_near(nd::clip(make_array(big, {(1 << 20) + 1}, DType::kFloat32), -1, 1).to_vector<double>(), want, 0,
                  "clip large");
  const OpDef* def = find_op("clip");
  ASSERT_NE(def, nullptr);
  EXPECT_THROW(def->parse_attrs(def->name, {{"a_min", "0"}}), ValueError);  // a_max is required
}

// ---- _copy and Cast

const DType kAllDtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBfloat16, DType::kUint8,
                            DType::kInt8,    DType::kInt32,   DType::kInt64,   DType::kBool};

bool is_signed_dtype(DType t) { return !(t == DType::kUint8 || t == DType::kBool); }

TEST(ElemwiseCast, EveryDtypePair) {
  for (Device d : kDevices)
    for (DType from : kAllDtypes)
      for (DType to : kAllDtypes) {
        std::vector<double> v = {0, 1, 2, 5, 100, 127, 64};
        if (from != DType::kBool && is_signed_dtype(from) && is_signed_dtype(to)) v.push_back(-3);
        if (is_floating(from) && to != DType::kBool) {
          v.push_back(2.75);  // truncates toward zero in integer dtypes
          if (is_signed_dtype(to)) v.push_back(-2.75);
        }
        if (from == DType::kBool) v = {0, 1, 1, 0};
        const int64_t n = static_cast<int64_t>(v.size());
        NDArray x = make_array(v, {n}, from, d);
        std::vector<double> stored = x.to_vector<double>();
        NDArray y = nd::cast(x, to);
        std::string what = fmt::format("Cast {} -> {} on {}", from, to, d);
        ASSERT_EQ(y.dtype(), to) << what;
        ASSERT_EQ(y.shape(), x.shape()) << what;
        std::vector<double> want;
        for (double s : stored)
          want.push_back(to == DType::kBool ? double(s != 0) : is_integral(to) ? std::trunc(s) : s);
        expect_all_near(y.to_vector<double>(), want, 0, what);
      }
}

TEST(ElemwiseCast, RoundsToHalfPrecisionAndCastsLargeArrays) {
  NDArray h = nd::cast(make_array({1.0 / 3, 65504, 1e6, -1e-8}, {4}, DType::kFloat32), DType::kFloat16);
  expect_all_near(h.to_vector<double>(), {0.333251953125, 65504, kInf, -0.0}, 0, "f32 -> f16");
  NDArray b = nd::cast(make_array({1.0 / 3, 1e30}, {2}, DType::kFloat32), DType::kBfloat16);
  expect_all_near(b.to_vector<double>(), {0.333984375, 1.0002555517425873e30}, 0, "f32 -> bf16");
  const int64_t n = (1 << 20) + 9;
  std::vector<double> v = uniform_values(n, -1000, 1000, 0.25, 4), want;
  for (double x : v) want.push_back(std::trunc(x));
  expect_all_near(nd::cast(make_array(v, {n}, DType::kFloat32), DType::kInt32).to_vector<double>(), want, 0,
                  "large f32 -> i32");
  EXPECT_EQ(find_op("cast"), &op_def(OpId::kCast));
  EXPECT_THROW(op_def(OpId::kCast).parse_attrs("Cast", {}), ValueError);  // dtype is required
}

TEST(ElemwiseCopy, EveryDtypeAndSize) {
  for (DType t : kAllDtypes)
    for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{t == DType::kFloat32 ? (1 << 20) + 1 : 9}}) {
      std::vector<double> v = uniform_values(n, 0, t == DType::kBool ? 1 : 2, 1, 8);
      NDArray x = make_array(v, {n}, t, Device::cpu(1));
      NDArray y = invoke1(OpId::kCopy, {x});
      EXPECT_EQ(y.dtype(), t);
      expect_all_near(y.to_vector<double>(), v, 0, fmt::format("_copy {}[{}]", t, n));
      expect_all_near(x.copy().to_vector<double>(), v, 0, fmt::format("copy() {}[{}]", t, n));
    }
}

// ---- where

TEST(ElemwiseWhere, ConditionOfAnyDtypeWithBroadcasting) {
  const Shape sc{2, 1, 3}, sx{4, 1}, sy{};
  std::vector<double> cond = {0, 1, -0.0, 2, kNaN, -1};  // -0.0 is false, NaN true
  std::vector<double> xv = uniform_values(4, -9, 9, 1, 3), yv = {42};
  for (Device d : kDevices)
    for (DType ct : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt32, DType::kUint8, DType::kBool})
      for (DType vt : {DType::kFloat32, DType::kInt64, DType::kFloat16, DType::kInt8}) {
        std::vector<double> c = cond;
        if (is_integral(ct)) c = {0, 1, 0, 2, 7, ct == DType::kUint8 || ct == DType::kBool ? 1.0 : -1.0};
        NDArray out = nd::where(make_array(c, sc, ct, d), make_array(xv, sx, vt, d), make_array(yv, sy, vt, d));
        std::string what = fmt::format("where({}{}, {}{}, {}{}) on {}", ct, sc, vt, sx, vt, sy, d);
        ASSERT_EQ(out.dtype(), vt) << what;
        Shape so{2, 4, 3};
        ASSERT_EQ(out.shape(), so) << what;
        std::vector<double> want;
        for (int64_t i = 0; i < so.size(); ++i) {
          double ci = c[static_cast<size_t>(broadcast_index(sc, so, i))];
          bool truthy = ct == DType::kBool ? ci != 0 : (std::isnan(ci) || ci != 0);
          want.push_back(truthy ? xv[static_cast<size_t>(broadcast_index(sx, so, i))] : yv[0]);
        }
        expect_all_near(out.to_vector<double>(), want, 0, what);
      }
}

TEST(ElemwiseWhere, LargeAndEmpty) {
  const int64_t n = (1 << 20) + 7;
  std::vector<double> c = uniform_values(n, -1, 1, 1, 5), x = uniform_values(n, 0, 100, 1, 6), want;
  for (int64_t i = 0; i < n; ++i) want.push_back(c[static_cast<size_t>(i)] != 0 ? x[static_cast<size_t>(i)] : -1);
  NDArray out = nd::where(make_array(c, {n}, DType::kFloat32), make_array(x, {n}, DType::kFloat32),
                          make_array({-1}, {1}, DType::kFloat32, Device::cpu(0)));
  expect_all_near(out.to_vector<double>(), want, 0, "where large");
  NDArray e = nd::where(nd::zeros({0, 3}), nd::zeros({3}), nd::ones({0, 1}));
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace kiln
