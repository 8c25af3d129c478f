// Binary, broadcast and scalar elemwise ops against references computed here,
// on cpu(0) and cpu(1), for floating and integer dtypes; in-place writes;
// errors; the OpDefs and aliases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/ops/elemwise.h"
#include "runtime/engine.h"
#include "tests/frontend/elemwise_test_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

struct BinaryCase {
  OpId op;          // broadcast_*
  OpId same_shape;  // elemwise_* (or the broadcast op when there is none)
  double (*ref)(double a, double b, bool integral);
  enum Domain { kAny, kNonzeroRhs, kPower } domain = kAny;
};

const BinaryCase kBinaryCases[] = {
    {OpId::kBroadcastAdd, OpId::kElemwiseAdd, [](double a, double b, bool) { return a + b; }},
    {OpId::kBroadcastSub, OpId::kElemwiseSub, [](double a, double b, bool) { return a - b; }},
    {OpId::kBroadcastMul, OpId::kElemwiseMul, [](double a, double b, bool) { return a * b; }},
    {OpId::kBroadcastDiv, OpId::kElemwiseDiv,
     [](double a, double b, bool integral) { return integral ? std::trunc(a / b) : a / b; }, BinaryCase::kNonzeroRhs},
    {OpId::kBroadcastPower, OpId::kBroadcastPower, [](double a, double b, bool) { return std::pow(a, b); },
     BinaryCase::kPower},
    {OpId::kBroadcastMaximum, OpId::kBroadcastMaximum, [](double a, double b, bool) { return std::max(a, b); }},
    {OpId::kBroadcastMinimum, OpId::kBroadcastMinimum, [](double a, double b, bool) { return std::min(a, b); }},
    {OpId::kBroadcastEqual, OpId::kBroadcastEqual, [](double a, double b, bool) { return double(a == b); }},
    {OpId::kBroadcastNotEqual, OpId::kBroadcastNotEqual, [](double a, double b, bool) { return double(a != b); }},
    {OpId::kBroadcastGreater, OpId::kBroadcastGreater, [](double a, double b, bool) { return double(a > b); }},
    {OpId::kBroadcastGreaterEqual, OpId::kBroadcastGreaterEqual,
     [](double a, double b, bool) { return double(a >= b); }},
    {OpId::kBroadcastLesser, OpId::kBroadcastLesser, [](double a, double b, bool) { return double(a < b); }},
    {OpId::kBroadcastLesserEqual, OpId::kBroadcastLesserEqual, [](double a, double b, bool) { return double(a <= b); }},
    {OpId::kBroadcastMod, OpId::kBroadcastMod, [](double a, double b, bool) { return a - std::floor(a / b) * b; },
     BinaryCase::kNonzeroRhs},
    {OpId::kBroadcastFmod, OpId::kBroadcastFmod, [](double a, double b, bool) { return std::fmod(a, b); },
     BinaryCase::kNonzeroRhs},
};

// Operands for `c` in dtype `t`: small exact values, ties included.
std::pair<std::vector<double>, std::vector<double>> operands(const BinaryCase& c, DType t, int64_t na, int64_t nb,
                                                             uint32_t seed = 1) {
  bool integral = is_integral(t);
  bool is_unsigned = t == DType::kUint8;
  double step = integral ? 1 : 0.5;
  std::vector<double> a = uniform_values(na, is_unsigned ? 0 : -4, 4, step, seed);
  std::vector<double> b = uniform_values(nb, is_unsigned ? 0 : -4, 4, step, seed + 7);
  if (c.domain == BinaryCase::kNonzeroRhs) {
    for (auto& x : b) x = x == 0 ? 3 : x;
  } else if (c.domain == BinaryCase::kPower) {
    a = uniform_values(na, integral ? (is_unsigned ? 0 : -3) : 0.25, 3, integral ? 1 : 0.25, seed);
    b = uniform_values(nb, integral ? 0 : -2, integral ? 4 : 2, integral ? 1 : 0.5, seed + 7);
  }
  return {a, b};
}

void check_binary(const BinaryCase& c, OpId op, DType t, const Shape& sa, const Shape& sb, Device d) {
  auto [a, b] = operands(c, t, sa.size(), sb.size());
  std::string what = describe(op_def(op).name, t, sa, sb, d);
  NDArray out = invoke1(op, {make_array(a, sa, t, d), make_array(b, sb, t, d)});
  EXPECT_EQ(out.shape(), reference_broadcast_shape(sa, sb)) << what;
  EXPECT_EQ(out.dtype(), t) << what;
  EXPECT_EQ(out.device(), d) << what;
  bool integral = is_integral(t);
  std::vector<double> want = reference_binary(a, sa, b, sb, [&](double x, double y) { return c.ref(x, y, integral); });
  for (double& w : want) w = wrap_to(t, w);
  expect_all_near(out.to_vector<double>(), want, tolerance(t), what);
}

TEST(ElemwiseBinary, SameShapeEveryOpDtypeAndDevice) {
  for (Device d : kDevices)
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kInt8, DType::kUint8})
      for (const BinaryCase& c : kBinaryCases) {
        check_binary(c, c.same_shape, t, Shape{3, 5}, Shape{3, 5}, d);
        check_binary(c, c.op, t, Shape{3, 5}, Shape{3, 5}, d);
      }
}

TEST(ElemwiseBinary, HalfPrecisionArithmetic) {
  for (DType t : {DType::kFloat16, DType::kBfloat16})
    for (const BinaryCase& c : kBinaryCases) check_binary(c, c.op, t, Shape{4, 3}, Shape{3}, Device::cpu(0));
}

TEST(ElemwiseBinary, BroadcastShapes) {
  const std::pair<Shape, Shape> cases[] = {
      {{2, 3}, {3}},
      {{3}, {2, 3}},
      {{2, 1, 4}, {3, 1}},
      {{}, {2, 3}},
      {{2, 3}, {}},
      {{1}, {5}},
      {{5}, {1}},
      {{2, 3}, {2, 1}},
      {{2, 1}, {1, 3}},
      {{4, 1, 3}, {1, 5, 1}},
      {{0, 3}, {3}},
      {{2, 0}, {2, 1}},
      {{3, 1, 1}, {1, 1}},
      {{2, 3, 4, 5}, {3, 1, 5}},
      {{7, 1, 33}, {7, 9, 1}},
      {{1, 1}, {1, 1, 1}},
  };
  for (Device d : kDevices)
    for (DType t : {DType::kFloat32, DType::kInt32})
      for (const auto& [sa, sb] : cases)
        for (const BinaryCase& c : kBinaryCases) check_binary(c, c.op, t, sa, sb, d);
}

TEST(ElemwiseBinary, ParallelPathsMatchReference) {
  // Above the parallel grain: contiguous, scalar-like, and each broadcast fast path.
  const int64_t n = (1 << 20) + 37;
  const std::pair<Shape, Shape> cases[] = {
      {{n}, {n}},
      {{n}, {1}},
      {{1}, {n}},
      {{n / 64, 64}, {64}},
      {{n / 64, 64}, {n / 64, 1}},
      {{64, 1, 129}, {1, 130, 129}},
  };
  const BinaryCase& add = kBinaryCases[0];
  const BinaryCase& greater = kBinaryCases[9];
  for (const auto& [sa, sb] : cases) check_binary(add, add.op, DType::kFloat32, sa, sb, Device::cpu(1));
  check_binary(greater, greater.op, DType::kInt32, cases[3].first, cases[3].second, Device::cpu(0));
}

// mod takes the divisor's sign, fmod the dividend's; a zero divisor gives
// NaN in floating point and 0 in integers; MIN by -1 leaves 0.
TEST(ElemwiseBinary, ModAndFmodSignsAndZeroDivisors) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (Device d : kDevices) {
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
      NDArray a = make_array({5, -5, 5, -5, 4, -4, 3, 1.5}, {8}, t, d);
      NDArray b = make_array({3, 3, -3, -3, 2, 2, 0, -0.5}, {8}, t, d);
      std::string what = fmt::format("{} on {}", t, d);
      expect_all_near(nd::mod(a, b).to_vector<double>(), {2, 1, -1, -2, 0, 0, nan, 0}, 0, "mod " + what);
      expect_all_near(nd::fmod(a, b).to_vector<double>(), {2, -2, 2, -2, 0, -0.0, nan, 0}, 0, "fmod " + what);
      std::vector<double> m = nd::mod(a, b).to_vector<double>();
      EXPECT_TRUE(std::signbit(m[7]) && !std::signbit(m[4])) << "mod's zero takes the divisor's sign, " << what;
    }
    for (DType t : {DType::kInt32, DType::kInt64, DType::kInt8}) {
      NDArray a = make_array({5, -5, 5, -5, 7, t == DType::kInt8 ? -128.0 : -2147483648.0}, {6}, t, d);
      NDArray b = make_array({3, 3, -3, -3, 0, -1}, {6}, t, d);
      std::string what = fmt::format("{} on {}", t, d);
      expect_all_near(nd::mod(a, b).to_vector<double>(), {2, 1, -1, -2, 0, 0}, 0, "mod " + what);
      expect_all_near(nd::fmod(a, b).to_vector<double>(), {2, -2, 2, -2, 0, 0}, 0, "fmod " + what);
    }
    NDArray u = nd::mod(make_array({7, 200, 9}, {3}, DType::kUint8, d), make_array({3, 7, 0}, {3}, DType::kUint8, d));
    expect_all_near(u.to_vector<double>(), {1, 4, 0}, 0, "mod u8");
  }
  EXPECT_EQ(find_op("_mod"), &op_def(OpId::kBroadcastMod));
  // MXNet's names, as graph JSON spells them.
  const std::pair<const char*, OpId> mxnet[] = {
      {"sin", OpId::kSin},
      {"cos", OpId::kCos},
      {"tan", OpId::kTan},
      {"arcsin", OpId::kArcsin},
      {"arccos", OpId::kArccos},
      {"arctan", OpId::kArctan},
      {"sinh", OpId::kSinh},
      {"cosh", OpId::kCosh},
      {"arcsinh", OpId::kArcsinh},
      {"arccosh", OpId::kArccosh},
      {"arctanh", OpId::kArctanh},
      {"round", OpId::kRound},
      {"rint", OpId::kRint},
      {"ceil", OpId::kCeil},
      {"floor", OpId::kFloor},
      {"sign", OpId::kSign},
      {"broadcast_mod", OpId::kBroadcastMod},
      {"_Mod", OpId::kBroadcastMod},
  };
  for (auto [name, id] : mxnet) EXPECT_EQ(find_op(name), &op_def(id)) << name;
}

// mod and fmod also take uint64 (the only arithmetic that does), exactly
// for values of 2^63 and more, with broadcasting; a zero divisor gives 0.
// Mixed with another dtype it is refused like every binary op.
TEST(ElemwiseBinary, ModAndFmodOfUint64) {
  const uint64_t top = ~uint64_t{0}, half = uint64_t{1} << 63;
  const std::vector<uint64_t> a{top, half + 5, 7, top - 1, half, 0}, b{half - 1, 10, 0};
  auto u64 = [](const std::vector<uint64_t>& v, Shape shape, Device d) {
    NDArray t = NDArray::empty(shape, {DType::kUint64, d});
    std::memcpy(t.data(), v.data(), v.size() * sizeof(uint64_t));
    return t;
  };
  std::vector<uint64_t> want(a.size());
  for (size_t i = 0; i < a.size(); ++i) want[i] = b[i % 3] == 0 ? 0 : a[i] % b[i % 3];
  for (Device d : kDevices) {
    for (auto [op, name] : {std::pair{OpId::kBroadcastMod, "mod"}, std::pair{OpId::kBroadcastFmod, "fmod"}}) {
      NDArray y = invoke1(op, {u64(a, Shape{2, 3}, d), u64(b, Shape{3}, d)});
      ASSERT_EQ(y.dtype(), DType::kUint64);
      ASSERT_EQ(y.shape(), (Shape{2, 3}));
      y.wait_to_read();
      std::vector<uint64_t> got(a.size());
      std::memcpy(got.data(), y.data(), got.size() * sizeof(uint64_t));
      EXPECT_EQ(got, want) << fmt::format("{} on {}", name, d);
    }
  }
  EXPECT_CONTAINS(test::error_of<TypeError>([&] {
                    nd::mod(u64(b, Shape{3}, Device::cpu(0)), nd::zeros(Shape{3}, {.dtype = DType::kInt64}));
                  }),
                  "lhs and rhs must have the same dtype, got uint64 and int64");
  EXPECT_CONTAINS(
      test::error_of<TypeError>([&] { return u64(b, Shape{3}, Device::cpu(0)) + u64(b, Shape{3}, Device::cpu(0)); }),
      "dtype uint64 is not supported");
}

TEST(ElemwiseBinary, NaNPropagatesThroughMaximumAndMinimum) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  NDArray a = make_array({nan, 1, nan, 2}, {4}, DType::kFloat32);
  NDArray b = make_array({1, nan, nan, 3}, {4}, DType::kFloat32);
  expect_all_near(nd::maximum(a, b).to_vector<double>(), {nan, nan, nan, 3}, 0, "maximum");
  expect_all_near(nd::minimum(a, b).to_vector<double>(), {nan, nan, nan, 2}, 0, "minimum");
}

TEST(ElemwiseBinary, IntegerEdgeCasesDoNotTrap) {
  const double kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  NDArray a = make_array({7, -7, kMin, kMax, 5}, {5}, DType::kInt32);
  NDArray b = make_array({0, 0, -1, 1, 2}, {5}, DType::kInt32);
  expect_all_near((a / b).to_vector<double>(), {0, 0, kMin, kMax, 2}, 0, "int32 division");
  expect_all_near((a + b).to_vector<double>(), {7, -7, kMin - 1 + 4294967296.0, kMin, 7}, 0, "int32 wraparound");
  NDArray u = make_array({250, 3}, {2}, DType::kUint8);
  expect_all_near((u + 10.0).to_vector<double>(), {4, 13}, 0, "uint8 wraparound");
  expect_all_near((u - 5.0).to_vector<double>(), {245, 254}, 0, "uint8 wraparound below 0");
  expect_all_near(nd::pow(make_array({2, -2, 3, 1, -1}, {5}, DType::kInt64), -1.0).to_vector<double>(),
                  {0, 0, 0, 1, -1}, 0, "int64 negative power");
}

// ---- scalar ops

// Integer powers: negative exponents give 1 / base^-e truncated toward zero.
double integer_pow(double base, double e) {
  if (e >= 0) return std::pow(base, e);
  if (base == 1) return 1;
  if (base == -1) return std::fmod(e, 2) == 0 ? 1 : -1;
  return 0;
}

struct ScalarCase {
  OpId op;
  double (*ref)(double x, double s, bool integral);
};

const ScalarCase kScalarCases[] = {
    {OpId::kPlusScalar, [](double x, double s, bool) { return x + s; }},
    {OpId::kMinusScalar, [](double x, double s, bool) { return x - s; }},
    {OpId::kRMinusScalar, [](double x, double s, bool) { return s - x; }},
    {OpId::kMulScalar, [](double x, double s, bool) { return x * s; }},
    {OpId::kDivScalar, [](double x, double s, bool i) { return i ? std::trunc(x / s) : x / s; }},
    {OpId::kRDivScalar, [](double x, double s, bool i) { return x == 0 && i ? 0
                                                                : i         ? std::trunc(s / x)
                                                                            : s / x; }},
    {OpId::kPowerScalar, [](double x, double s, bool i) { return i ? integer_pow(x, s) : std::pow(x, s); }},
    {OpId::kRPowerScalar, [](double x, double s, bool i) { return i ? integer_pow(s, x) : std::pow(s, x); }},
    {OpId::kMaximumScalar, [](double x, double s, bool) { return std::max(x, s); }},
    {OpId::kMinimumScalar, [](double x, double s, bool) { return std::min(x, s); }},
    {OpId::kEqualScalar, [](double x, double s, bool) { return double(x == s); }},
    {OpId::kNotEqualScalar, [](double x, double s, bool) { return double(x != s); }},
    {OpId::kGreaterScalar, [](double x, double s, bool) { return double(x > s); }},
    {OpId::kGreaterEqualScalar, [](double x, double s, bool) { return double(x >= s); }},
    {OpId::kLesserScalar, [](double x, double s, bool) { return double(x < s); }},
    {OpId::kLesserEqualScalar, [](double x, double s, bool) { return double(x <= s); }},
};

void check_scalar(const ScalarCase& c, DType t, double s, int64_t n, Device d) {
  bool integral = is_integral(t);
  // Integer arrays see the scalar truncated to their dtype (MXNet 1.x).
  double s_eff = integral ? std::trunc(s) : s;
  bool power = c.op == OpId::kPowerScalar || c.op == OpId::kRPowerScalar;
  std::vector<double> x = power ? uniform_values(n, integral ? 0 : 0.25, 3, integral ? 1 : 0.25)
                                : uniform_values(n, -4, 4, integral ? 1 : 0.5);
  std::string what = fmt::format("{}({}[{}], scalar={}) on {}", op_def(c.op).name, dtype_short_name(t), n, s, d);
  NDArray out = invoke1(c.op, {make_array(x, {n}, t, d)}, OpAttrs::make(ScalarAttrs{.scalar = s}));
  ASSERT_EQ(out.dtype(), t) << what;
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = c.ref(x[i], s_eff, integral);
  expect_all_near(out.to_vector<double>(), want, tolerance(t), what);
}

TEST(ElemwiseScalar, EveryOpDtypeAndDevice) {
  for (Device d : kDevices)
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64})
      for (const ScalarCase& c : kScalarCases)
        for (double s : {2.0, 2.5, -1.5}) check_scalar(c, t, s, 50, d);
}

TEST(ElemwiseScalar, LargeArraysAndEmptyArrays) {
  for (const ScalarCase& c : kScalarCases) check_scalar(c, DType::kInt32, 2, 0, Device::cpu(1));
  // Every scalar op shares one loop; one direct and one reversed op cover the parallel path.
  for (const ScalarCase& c : {kScalarCases[1], kScalarCases[5]})
    check_scalar(c, DType::kFloat32, 1.5, (1 << 20) + 3, Device::cpu(0));
}

TEST(ElemwiseScalar, ScalarSaturatesToIntegerRange) {
  NDArray u = make_array({0, 100, 255}, {3}, DType::kUint8);
  expect_all_near(nd::minimum(u, 1000.0).to_vector<double>(), {0, 100, 255}, 0, "minimum(u8, 1000)");
  expect_all_near(nd::maximum(u, -5.0).to_vector<double>(), {0, 100, 255}, 0, "maximum(u8, -5)");
}

TEST(ElemwiseScalar, AcceptsMXNetStringAttributes) {
  const OpDef* def = find_op("_PlusScalar");
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->id, OpId::kPlusScalar);
  OpAttrs attrs = def->parse_attrs(def->name, {{"scalar", "2.5"}, {"is_int", "False"}});
  EXPECT_EQ(attrs.as<ScalarAttrs>().scalar, 2.5);
  NDArray y = invoke1(def->id, {nd::ones({2})}, def->parse_attrs(def->name, {{"scalar", "2"}, {"is_int", "True"}}));
  expect_all_near(y.to_vector<double>(), {3, 3}, 0, "_plus_scalar from strings");
  EXPECT_THROW(def->parse_attrs(def->name, {}), ValueError);  // scalar is required
}

// ---- frontend operators

TEST(ElemwiseFrontend, OperatorsMatchReference) {
  for (Device d : kDevices) {
    std::vector<double> av = uniform_values(6, -3, 3, 0.5, 3), bv = uniform_values(3, 1, 3, 0.5, 4);
    NDArray a = make_array(av, {2, 3}, DType::kFloat32, d), b = make_array(bv, {3}, DType::kFloat32, d);
    auto check = [&](const NDArray& got, double (*f)(double, double), const char* what) {
      expect_all_near(got.to_vector<double>(), reference_binary(av, {2, 3}, bv, {3}, f), 1e-6, what);
    };
    auto check_scalar_op = [&](const NDArray& got, const std::function<double(double)>& f, const char* what) {
      std::vector<double> want;
      for (double x : av) want.push_back(f(x));
      expect_all_near(got.to_vector<double>(), want, 1e-6, what);
    };
    check(
        a + b, [](double x, double y) { return x + y; }, "a + b");
    check(
        a - b, [](double x, double y) { return x - y; }, "a - b");
    check(
        a * b, [](double x, double y) { return x * y; }, "a * b");
    check(
        a / b, [](double x, double y) { return x / y; }, "a / b");
    check(
        a == b, [](double x, double y) { return double(x == y); }, "a == b");
    check(
        a != b, [](double x, double y) { return double(x != y); }, "a != b");
    check(
        a > b, [](double x, double y) { return double(x > y); }, "a > b");
    check(
        a >= b, [](double x, double y) { return double(x >= y); }, "a >= b");
    check(
        a < b, [](double x, double y) { return double(x < y); }, "a < b");
    check(
        a <= b, [](double x, double y) { return double(x <= y); }, "a <= b");
    check(
        nd::maximum(a, b), [](double x, double y) { return std::max(x, y); }, "maximum(a, b)");
    check(
        nd::minimum(a, b), [](double x, double y) { return std::min(x, y); }, "minimum(a, b)");
    check(
        nd::pow(b + 0.0 * a, b), [](double, double y) { return std::pow(y, y); }, "pow(b, b)");
    check_scalar_op(
        a + 2, [](double x) { return x + 2; }, "a + 2");
    check_scalar_op(
        2 + a, [](double x) { return 2 + x; }, "2 + a");
    check_scalar_op(
        a - 2, [](double x) { return x - 2; }, "a - 2");
    check_scalar_op(
        2 - a, [](double x) { return 2 - x; }, "2 - a");
    check_scalar_op(
        a * 3, [](double x) { return x * 3; }, "a * 3");
    check_scalar_op(
        3 * a, [](double x) { return 3 * x; }, "3 * a");
    check_scalar_op(
        a / 4, [](double x) { return x / 4; }, "a / 4");
    check_scalar_op(
        4 / (a + 10), [](double x) { return 4 / (x + 10); }, "4 / (a + 10)");
    check_scalar_op(
        -a, [](double x) { return -x; }, "-a");
    check_scalar_op(
        a == 1, [](double x) { return double(x == 1); }, "a == 1");
    check_scalar_op(
        1 == a, [](double x) { return double(1 == x); }, "1 == a");
    check_scalar_op(
        a != 1, [](double x) { return double(x != 1); }, "a != 1");
    check_scalar_op(
        1 != a, [](double x) { return double(1 != x); }, "1 != a");
    check_scalar_op(
        a > 1, [](double x) { return double(x > 1); }, "a > 1");
    check_scalar_op(
        1 > a, [](double x) { return double(1 > x); }, "1 > a");
    check_scalar_op(
        a >= 1, [](double x) { return double(x >= 1); }, "a >= 1");
    check_scalar_op(
        1 >= a, [](double x) { return double(1 >= x); }, "1 >= a");
    check_scalar_op(
        a < 1, [](double x) { return double(x < 1); }, "a < 1");
    check_scalar_op(
        1 < a, [](double x) { return double(1 < x); }, "1 < a");
    check_scalar_op(
        a <= 1, [](double x) { return double(x <= 1); }, "a <= 1");
    check_scalar_op(
        1 <= a, [](double x) { return double(1 <= x); }, "1 <= a");
    check_scalar_op(
        nd::maximum(a, 0.5), [](double x) { return std::max(x, 0.5); }, "maximum(a, 0.5)");
    check_scalar_op(
        nd::maximum(0.5, a), [](double x) { return std::max(x, 0.5); }, "maximum(0.5, a)");
    check_scalar_op(
        nd::minimum(a, 0.5), [](double x) { return std::min(x, 0.5); }, "minimum(a, 0.5)");
    check_scalar_op(
        nd::minimum(0.5, a), [](double x) { return std::min(x, 0.5); }, "minimum(0.5, a)");
    check_scalar_op(
        nd::pow(a, 2.0), [](double x) { return x * x; }, "pow(a, 2)");
    check_scalar_op(
        nd::pow(2.0, a), [](double x) { return std::pow(2, x); }, "pow(2, a)");
  }
}

// ---- in-place writes (out aliases an input)

TEST(ElemwiseInPlace, OutputMayAliasAnInput) {
  const int64_t n = (1 << 20) + 5;  // parallel path
  for (int64_t size : {int64_t{7}, n}) {
    std::vector<double> av = uniform_values(size, -4, 4, 0.5, 5), bv = uniform_values(size, -4, 4, 0.5, 6);
    NDArray a = make_array(av, {size}, DType::kFloat32), b = make_array(bv, {size}, DType::kFloat32);
    invoke(OpId::kElemwiseAdd, {a, b}, {}, {.out = {&a, 1}});                                  // a = a + b
    invoke(OpId::kElemwiseMul, {a, b}, {}, {.out = {&b, 1}});                                  // b = a * b
    invoke(OpId::kMulScalar, {a}, OpAttrs::make(ScalarAttrs{.scalar = 2}), {.out = {&a, 1}});  // a *= 2
    invoke(OpId::kExp, {b}, {}, {.out = {&b, 1}});
    invoke(OpId::kCopy, {a}, {}, {.out = {&a, 1}});
    std::vector<double> want_a(av.size()), want_b(av.size());
    for (size_t i = 0; i < av.size(); ++i) {
      double s = av[i] + bv[i];
      want_a[i] = 2 * s;
      want_b[i] = std::exp(static_cast<double>(static_cast<float>(s * bv[i])));
    }
    expect_all_near(a.to_vector<double>(), want_a, 1e-6, "in-place add, mul_scalar, copy");
    expect_all_near(b.to_vector<double>(), want_b, 4e-6, "in-place mul, exp");
  }
}

TEST(ElemwiseInPlace, OverlappingBroadcastOperandIsReadBeforeWrite) {
  // x += x[0]: the row operand is a view of the output's first row.
  std::vector<double> v = {1, 2, 3, 10, 20, 30, 100, 200, 300};
  NDArray x = make_array(v, {3, 3}, DType::kFloat32);
  x += x.at(0);
  expect_all_near(x.to_vector<double>(), {2, 4, 6, 11, 22, 33, 101, 202, 303}, 0, "x += x[0]");
  // where(y[0], y[2], y) into y: writing row 0 zeroes the condition row, which
  // rows 1 and 2 must still see as it was.
  NDArray y = make_array({1, 0, 1, 10, 20, 30, 0, 0, 0}, {3, 3}, DType::kFloat32);
  invoke(OpId::kWhere, {y.at(0), y.at(2), y}, {}, {.out = {&y, 1}});
  expect_all_near(y.to_vector<double>(), {0, 0, 0, 0, 20, 0, 0, 0, 0}, 0, "where into its own operands");
}

// ---- errors: raised at the call, nothing queued, inputs stay usable

using test::error_of;

void expect_contains(const std::string& message, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' not in: " << message;
}

TEST(ElemwiseErrors, ShapeMismatchNamesOpAndShapesAndQueuesNothing) {
  NDArray a = nd::ones({2, 3}), b = nd::ones({3, 2}), c = nd::ones({4});
  engine::wait_all();
  expect_contains(error_of<ShapeError>([&] {
                    invoke1(OpId::kElemwiseAdd, {a, b});
                  }),
                  {"elemwise_add", "[2,3]", "[3,2]"});
  expect_contains(error_of<ShapeError>([&] { (void)(a + c); }), {"broadcast_add", "[2,3]", "[4]"});
  expect_contains(error_of<ShapeError>([&] { (void)(a > b); }), {"broadcast_greater", "[2,3]", "[3,2]"});
  expect_contains(error_of<ShapeError>([&] { nd::where(a, a, c); }), {"where", "[2,3]", "[4]"});
  EXPECT_EQ(engine::get().num_pending(), 0);
  expect_all_near((a + a).to_vector<double>(), std::vector<double>(6, 2), 0, "inputs usable after the error");
}

TEST(ElemwiseErrors, DtypeMismatchAndUnsupportedDtypes) {
  NDArray f = nd::ones({2}), i = nd::ones({2}, {.dtype = DType::kInt32});
  expect_contains(error_of<TypeError>([&] { (void)(f + i); }), {"elemwise_add", "float32", "int32"});
  expect_contains(error_of<TypeError>([&] {
                    (void)(f * nd::ones({3, 1}, {.dtype = DType::kInt64}));
                  }),
                  {"broadcast_mul", "float32", "int64"});
  expect_contains(error_of<TypeError>([&] { nd::exp(i); }), {"exp", "int32"});
  expect_contains(error_of<TypeError>([&] { nd::sigmoid(i); }), {"sigmoid", "int32"});
  expect_contains(error_of<TypeError>([&] { nd::where(f, f, i); }), {"where", "float32", "int32"});
  NDArray flags = nd::cast(f, DType::kBool);
  expect_contains(error_of<TypeError>([&] { (void)(flags + flags); }), {"elemwise_add", "bool"});
  expect_all_near(nd::exp(f).to_vector<double>(), {std::exp(1.0), std::exp(1.0)}, 1e-6, "usable after errors");
}

// ---- the OpDefs

TEST(ElemwiseOpDefs, FieldsAndAliases) {
  for (const OpDef& def : all_ops()) {
    if (def.id < OpId::kElemwiseAdd || def.id > OpId::kBroadcastFmod) continue;  // the elemwise block of op_list.def
    SCOPED_TRACE(std::string(def.name));
    EXPECT_NE(def.infer, nullptr);
    EXPECT_FALSE(def.doc.empty());
    EXPECT_EQ(def.input_names.size(), static_cast<size_t>(def.num_inputs));
  }
  EXPECT_EQ(op_def(OpId::kElemwiseAdd).input_names, (std::vector<std::string_view>{"lhs", "rhs"}));
  EXPECT_EQ(op_def(OpId::kWhere).input_names, (std::vector<std::string_view>{"condition", "x", "y"}));
  EXPECT_EQ(op_def(OpId::kExp).inplace, (std::vector<std::pair<int, int>>{{0, 0}}));
  EXPECT_EQ(op_def(OpId::kElemwiseMul).inplace, (std::vector<std::pair<int, int>>{{0, 0}}));
  EXPECT_FALSE(op_def(OpId::kBroadcastEqual).differentiable);
  EXPECT_FALSE(op_def(OpId::kLesserEqualScalar).differentiable);
  EXPECT_TRUE(op_def(OpId::kBroadcastAdd).differentiable);
  EXPECT_FALSE(op_def(OpId::kRint).differentiable);
  EXPECT_FALSE(op_def(OpId::kSign).differentiable);
  EXPECT_TRUE(op_def(OpId::kArctanh).differentiable);
  EXPECT_TRUE(op_def(OpId::kBroadcastFmod).differentiable);
  const std::pair<const char*, OpId> aliases[] = {
      {"_Plus", OpId::kElemwiseAdd},
      {"_plus", OpId::kElemwiseAdd},
      {"_add", OpId::kElemwiseAdd},
      {"_Minus", OpId::kElemwiseSub},
      {"_sub", OpId::kElemwiseSub},
      {"_Mul", OpId::kElemwiseMul},
      {"_Div", OpId::kElemwiseDiv},
      {"_MinusScalar", OpId::kMinusScalar},
      {"_RDivScalar", OpId::kRDivScalar},
      {"_maximum", OpId::kBroadcastMaximum},
      {"identity", OpId::kCopy},
      {"cast", OpId::kCast},
      {"_copy", OpId::kCopy},
      {"Cast", OpId::kCast},
      {"_equal", OpId::kBroadcastEqual},
  };
  for (auto [name, id] : aliases) {
    const OpDef* def = find_op(name);
    ASSERT_NE(def, nullptr) << name;
    EXPECT_EQ(def->id, id) << name;
  }
}

}  // namespace
}  // namespace kiln
