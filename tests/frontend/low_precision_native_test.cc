// The CPU kernels that take float16/bfloat16 as they are (HalfSupport::kAny,
// runtime/kernel.h) rather than through the widening adaptor, and the float32
// accumulation they promise: results over long rows and 100k elements that a
// 16-bit accumulator could not produce. Element-by-element agreement with
// float32 for every op is low_precision_test's job.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "tests/op_cases.h"

namespace kiln {
namespace {

using op_cases::Case;
using op_cases::run_case;

constexpr DType kLow[] = {DType::kBfloat16, DType::kFloat16};

// Every op in `names` registers its CPU kernel with HalfSupport::kAny.
void expect_native(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const OpDef* def = find_op(name);
    ASSERT_NE(def, nullptr) << name;
    EXPECT_EQ(half_support(def->id, DeviceKind::kCPU), HalfSupport::kAny) << name << " is widened on cpu";
  }
}

TEST(LowPrecisionNative, PoolingIsNative) { expect_native({"Pooling", "_backward_Pooling"}); }

TEST(LowPrecisionNative, ActivationsAreNative) {
  expect_native({"Activation", "_backward_Activation", "LeakyReLU", "_backward_LeakyReLU"});
}

TEST(LowPrecisionNative, SoftmaxFamilyIsNative) {
  expect_native({"softmax", "log_softmax", "_backward_softmax", "_backward_log_softmax", "_kiln_softmax_cross_entropy",
                 "_backward_kiln_softmax_cross_entropy"});
}

TEST(LowPrecisionNative, ReductionsAreNative) { expect_native({"sum", "mean", "max", "min", "prod", "norm"}); }

TEST(LowPrecisionNative, DropoutIsNative) { expect_native({"Dropout"}); }

TEST(LowPrecisionNative, NormalizationAndAttentionAreNative) {
  expect_native({"LayerNorm", "_backward_LayerNorm", "_kiln_attention", "_backward_kiln_attention"});
}

TEST(LowPrecisionNative, ArgExtremaAndPickAreNative) { expect_native({"argmax", "argmin", "pick", "_backward_pick"}); }

// The spacing of 16-bit values of type t at magnitude m (> 0 or 0).
double ulp_16bit(DType t, double m) {
  const int mantissa = t == DType::kBfloat16 ? 7 : 10, min_exp = t == DType::kBfloat16 ? -126 : -14;
  const int e = m > 0 ? std::max(std::ilogb(m), min_exp) : min_exp;
  return std::ldexp(1.0, e - mantissa);
}

// Runs every case in bfloat16 and float16 and, on the same 16-bit inputs
// widened to float32, in float32 (inputs the op keeps in float32, and
// non-float inputs, are passed as they are to both): each 16-bit output must
// be the float32 output rounded once to its dtype, bit for bit (or, with
// max_ulps = 1, at most one unit in the last place of the 16-bit type away);
// outputs that are float32 in both calls (indices, logsumexp) must be equal.
void expect_float32_rounded_once(const std::vector<Case>& cases, int max_ulps = 0) {
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    const OpDef& def = *find_op(c.op);
    std::vector<NDArray> host;
    for (const auto& spec : c.inputs) host.push_back(op_cases::make_input(spec, rng));
    for (DType t : kLow) {
      SCOPED_TRACE(op_cases::describe(c) + " in " + std::string(dtype_name(t)));
      std::vector<NDArray> narrow, wide;
      for (size_t i = 0; i < host.size(); ++i) {
        if (!is_floating(host[i].dtype()) || def.keeps_float32(i)) {
          narrow.push_back(host[i]);
          wide.push_back(host[i]);
          continue;
        }
        narrow.push_back(host[i].astype(t));
        wide.push_back(narrow.back().astype(DType::kFloat32));
      }
      const std::vector<NDArray> got = run_case(c, narrow, Device::cpu(0));
      const std::vector<NDArray> want = run_case(c, wide, Device::cpu(0));
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < got.size(); ++k) {
        ASSERT_EQ(got[k].shape(), want[k].shape()) << "output " << k;
        const std::vector<double> g = got[k].to_vector<double>();
        const std::vector<double> w = want[k].astype(got[k].dtype()).to_vector<double>();
        int failures = 0;
        const DType ot = got[k].dtype();
        for (size_t e = 0; e < g.size() && failures < 3; ++e)
          if (g[e] != w[e] &&
              (max_ulps == 0 || ot == DType::kFloat32 ||
               std::abs(g[e] - w[e]) > max_ulps * ulp_16bit(ot, std::max(std::abs(g[e]), std::abs(w[e]))))) {
            ++failures;
            ADD_FAILURE() << "output " << k << " (" << dtype_name(got[k].dtype()) << ") element " << e << ": " << g[e]
                          << ", float32 rounded once gives " << w[e];
          }
      }
    }
  }
}

// Rows (short, vector-long, longer than one parallel piece), columns
// (a kept axis narrower and wider than a vector), the whole array, with the
// ties that 16-bit rounding makes: the first extremum in every dtype.
TEST(LowPrecisionNative, ArgExtremaAndPickAreTheFloat32KernelsRoundedOnce) {
  using op_cases::in;
  using op_cases::ints;
  expect_float32_rounded_once({
      {"argmax", {in({3, 4, 5})}, {{"axis", "1"}}},
      {"argmin", {in({3, 4, 5})}, {{"axis", "2"}, {"keepdims", "True"}}},
      {"argmax", {in({2, 40000}, 0, 4)}, {{"axis", "1"}}},
      {"argmin", {in({3, 77}, 0, 4)}, {{"axis", "-1"}}},
      {"argmax", {in({3000, 4})}, {{"axis", "0"}}},
      {"argmin", {in({50, 37}, 0, 2)}, {{"axis", "0"}}},
      {"argmax", {in({7, 9})}, {}},
      {"pick", {in({3, 4}), ints({3}, 0, 3)}, {{"axis", "1"}}},
      {"pick", {in({3, 5, 2}), ints({3, 2}, 0, 4)}, {{"axis", "1"}}},
      {"pick", {in({3, 4}), ints({3}, -5, 6)}, {{"axis", "1"}, {"mode", "wrap"}}},
      {"_backward_pick", {in({3}), ints({3}, 0, 3)}, {{"axis", "1"}, {"data_shape", "(3, 4)"}}},
      {"_backward_pick", {in({3, 2}), ints({3, 2}, 0, 4)}, {{"axis", "1"}, {"data_shape", "(3, 5, 2)"}}},
  });
}

// 1-D and 3-D pooling in 16 bits where oneDNN has no kernel for the dtype
// on this CPU or MXNet's rescaling follows it: the direct loop, within one
// 16-bit ulp of oneDNN's float32 result rounded once (sums in another order).
TEST(LowPrecisionNative, OneAndThreeDimensionalPoolingIsWithinOneUlpOfFloat32) {
  using op_cases::in;
  const AttrMap avg_full{
      {"kernel", "(3,)"}, {"stride", "(2,)"}, {"pad", "(1,)"}, {"pool_type", "avg"}, {"pooling_convention", "full"}};
  const AttrMap sum3{{"kernel", "(2, 3, 2)"}, {"stride", "(2, 2, 1)"}, {"pad", "(1, 1, 0)"}, {"pool_type", "sum"}};
  const AttrMap avg3{{"kernel", "(3, 3, 3)"},
                     {"stride", "(2, 2, 2)"},
                     {"pad", "(1, 1, 1)"},
                     {"pool_type", "avg"},
                     {"count_include_pad", "False"}};
  const AttrMap max1{{"kernel", "(3,)"}, {"stride", "(2,)"}, {"pad", "(1,)"}, {"pool_type", "max"}};
  const AttrMap max3{{"kernel", "(2, 2, 3)"}, {"stride", "(2, 2, 2)"}, {"pool_type", "max"}};
  expect_float32_rounded_once(
      {
          {"Pooling", {in({2, 3, 11})}, max1},
          {"Pooling", {in({2, 3, 11})}, avg_full},
          {"Pooling", {in({2, 3, 10})}, {{"kernel", "(4,)"}, {"stride", "(3,)"}, {"pool_type", "sum"}}},
          {"Pooling", {in({1, 2, 5, 6, 7})}, max3},
          {"Pooling", {in({1, 2, 5, 6, 7})}, sum3},
          {"Pooling", {in({1, 2, 5, 5, 5})}, avg3},
          {"_backward_Pooling", {in({2, 3, 6}), in({2, 3, 11}), in({2, 3, 6})}, max1},
          {"_backward_Pooling", {in({2, 3, 6}), in({2, 3, 11}), in({2, 3, 6})}, avg_full},
          {"_backward_Pooling", {in({1, 2, 2, 3, 3}), in({1, 2, 5, 6, 7}), in({1, 2, 2, 3, 3})}, max3},
          {"_backward_Pooling", {in({1, 2, 3, 3, 6}), in({1, 2, 5, 6, 7}), in({1, 2, 3, 3, 6})}, sum3},
          {"_backward_Pooling", {in({1, 2, 3, 3, 3}), in({1, 2, 5, 5, 5}), in({1, 2, 3, 3, 3})}, avg3},
      },
      1);
}

// Contiguous rows (odd lengths, one longer than any vector loop) and rows
// along a middle or first axis, forward and backward.
TEST(LowPrecisionNative, LayerNormIsTheFloat32KernelRoundedOnce) {
  using op_cases::in;
  expect_float32_rounded_once({
      {"LayerNorm", {in({4, 33}, -2, 3), in({33}), in({33})}, {}},
      {"LayerNorm", {in({3, 1000}, -2, 3), in({1000}), in({1000})}, {{"eps", "0.001"}}},
      {"LayerNorm", {in({7, 1}), in({1}), in({1})}, {}},
      {"LayerNorm", {in({3, 5, 6}, -2, 3), in({5}), in({5})}, {{"axis", "1"}}},
      {"LayerNorm", {in({9, 4}, -2, 3), in({9}), in({9})}, {{"axis", "0"}}},
      {"_backward_LayerNorm", {in({40, 33}), in({40, 33}, -2, 3), in({33}), in({40, 1}), in({40, 1}, 0.5, 2)}, {}},
      {"_backward_LayerNorm", {in({600, 17}), in({600, 17}, -2, 3), in({17}), in({600, 1}), in({600, 1}, 0.5, 2)}, {}},
      {"_backward_LayerNorm",
       {in({3, 5, 6}), in({3, 5, 6}), in({5}), in({3, 1, 6}), in({3, 1, 6}, 0.5, 2)},
       {{"axis", "1"}}},
      {"_backward_LayerNorm",
       {in({9, 4}), in({9, 4}, -2, 3), in({9}), in({1, 4}), in({1, 4}, 0.5, 2)},
       {{"axis", "0"}}},
  });
}

NDArray filled(Shape shape, float value, DType t) {
  return nd::array<float>(std::vector<float>(static_cast<size_t>(shape.size()), value), shape).astype(t);
}

std::vector<float> values(const NDArray& x) { return x.astype(DType::kFloat32).to_vector<float>(); }

// 100k ones: a 16-bit accumulator stops at 256 (bfloat16) or 2048 (float16).
TEST(LowPrecisionNative, MeanOf100kElementsAccumulatesInFloat32) {
  for (DType t : kLow) {
    SCOPED_TRACE(dtype_name(t));
    const NDArray row = filled(Shape{100000}, 1.0f, t);
    EXPECT_EQ(values(run_case({"mean", {}, {}}, {row}, Device::cpu(0))[0]), std::vector<float>{1.0f});
    // The kept axis last: the column path, accumulating whole rows.
    const NDArray cols = filled(Shape{100000, 3}, 1.0f, t);
    EXPECT_EQ(values(run_case({"mean", {}, {{"axis", "(0,)"}}}, {cols}, Device::cpu(0))[0]),
              std::vector<float>(3, 1.0f));
  }
}

TEST(LowPrecisionNative, Bfloat16SumOf100kElementsAccumulatesInFloat32) {
  const NDArray x = filled(Shape{100000}, 1.0f, DType::kBfloat16);
  const float got = values(run_case({"sum", {}, {}}, {x}, Device::cpu(0))[0])[0];
  EXPECT_NEAR(got, 100000.0f, 100000.0f / 256) << "one bfloat16 rounding of the float32 sum";
  const float norm = values(run_case({"norm", {}, {{"ord", "1"}}}, {x}, Device::cpu(0))[0])[0];
  EXPECT_NEAR(norm, 100000.0f, 100000.0f / 256);
}

// softmax over a row of 100k equal values is 1e-5 everywhere; summing the
// exponentials (each 1) in 16-bit would give at most 1/256.
TEST(LowPrecisionNative, SoftmaxOverALongRowAccumulatesInFloat32) {
  constexpr int64_t kRow = 100000;
  for (DType t : kLow) {
    SCOPED_TRACE(dtype_name(t));
    const NDArray x = filled(Shape{2, kRow}, 0.5f, t);
    const std::vector<float> y = values(run_case({"softmax", {}, {}}, {x}, Device::cpu(0))[0]);
    EXPECT_NEAR(y.front(), 1e-5f, 1e-5f / 64);
    EXPECT_NEAR(y.back(), 1e-5f, 1e-5f / 64);
    const std::vector<float> ly = values(run_case({"log_softmax", {}, {}}, {x}, Device::cpu(0))[0]);
    EXPECT_NEAR(ly.front(), -std::log(1e5f), std::log(1e5f) / 64);
    // Along axis 0 of [kRow, 3]: the column path.
    const NDArray xc = filled(Shape{kRow, 3}, 0.5f, t);
    const std::vector<float> yc = values(run_case({"softmax", {}, {{"axis", "0"}}}, {xc}, Device::cpu(0))[0]);
    EXPECT_NEAR(yc.front(), 1e-5f, 1e-5f / 64);
    EXPECT_NEAR(yc.back(), 1e-5f, 1e-5f / 64);
    // Cross-entropy over kRow equal classes: log(kRow).
    const NDArray label = nd::array<float>({3, 7}, Shape{2});
    const std::vector<float> ce =
        values(run_case({"_kiln_softmax_cross_entropy", {}, {}}, {x, label}, Device::cpu(0))[0]);
    EXPECT_NEAR(ce[0], std::log(1e5f), std::log(1e5f) / 64);
  }
}

// Every pooling path in 16-bit against float32 on the same (rounded) inputs:
// the direct 2-D loops (clipped, tiled and general windows), oneDNN's 1-D and
// 3-D pooling, and the widened calls that need MXNet's rescaling.
TEST(LowPrecisionNative, PoolingMatchesFloat32OnEveryPath) {
  using op_cases::in;
  const std::vector<Case> cases = {
      {"Pooling",
       {in({2, 3, 7, 7})},
       {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"}, {"pool_type", "max"}}},
      {"Pooling", {in({2, 3, 6, 6})}, {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "sum"}}},
      {"Pooling",
       {in({2, 3, 5, 5})},
       {{"kernel", "(3, 3)"},
        {"stride", "(2, 2)"},
        {"pad", "(1, 1)"},
        {"pool_type", "avg"},
        {"count_include_pad", "False"}}},
      {"Pooling", {in({2, 3, 9})}, {{"kernel", "(3,)"}, {"stride", "(2,)"}, {"pool_type", "max"}}},
      {"Pooling", {in({2, 3, 9})}, {{"kernel", "(3,)"}, {"stride", "(2,)"}, {"pad", "(1,)"}, {"pool_type", "avg"}}},
      {"Pooling",
       {in({2, 3, 9})},
       {{"kernel", "(3,)"}, {"stride", "(2,)"}, {"pad", "(1,)"}, {"pool_type", "avg"}, {"pooling_convention", "full"}}},
      {"Pooling", {in({1, 2, 4, 4, 4})}, {{"kernel", "(2, 2, 2)"}, {"stride", "(2, 2, 2)"}, {"pool_type", "max"}}},
      {"Pooling",
       {in({1, 2, 5, 5, 5})},
       {{"kernel", "(3, 3, 3)"}, {"stride", "(2, 2, 2)"}, {"pad", "(1, 1, 1)"}, {"pool_type", "avg"}}},
      {"_backward_Pooling",
       {in({2, 3, 4, 4}), in({2, 3, 7, 7}), in({2, 3, 4, 4})},
       {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"}, {"pool_type", "max"}}},
      {"_backward_Pooling",
       {in({2, 3, 3, 3}), in({2, 3, 5, 5}), in({2, 3, 3, 3})},
       {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"}, {"pool_type", "avg"}}},
      {"_backward_Pooling",
       {in({2, 3, 4}), in({2, 3, 9}), in({2, 3, 4})},
       {{"kernel", "(3,)"}, {"stride", "(2,)"}, {"pool_type", "max"}}},
      {"_backward_Pooling",
       {in({2, 3, 5}), in({2, 3, 9}), in({2, 3, 5})},
       {{"kernel", "(3,)"}, {"stride", "(2,)"}, {"pad", "(1,)"}, {"pool_type", "avg"}, {"pooling_convention", "full"}}},
      {"_backward_Pooling",
       {in({1, 2, 2, 2, 2}), in({1, 2, 4, 4, 4}), in({1, 2, 2, 2, 2})},
       {{"kernel", "(2, 2, 2)"}, {"stride", "(2, 2, 2)"}, {"pool_type", "avg"}}},
  };
  std::mt19937 rng(5);
  for (const Case& c : cases) {
    std::vector<NDArray> host;
    for (const auto& spec : c.inputs) host.push_back(op_cases::make_input(spec, rng));
    for (DType t : kLow) {
      SCOPED_TRACE(op_cases::describe(c) + " in " + std::string(dtype_name(t)));
      std::vector<NDArray> narrow, wide;
      for (const NDArray& h : host) {
        narrow.push_back(h.astype(t));
        wide.push_back(narrow.back().astype(DType::kFloat32));
      }
      const std::vector<NDArray> got = run_case(c, narrow, Device::cpu(0));
      const std::vector<NDArray> want = run_case(c, wide, Device::cpu(0));
      ASSERT_EQ(got[0].dtype(), t);
      op_cases::expect_close_16bit(c, t, want, got, "float32", dtype_name(t));
    }
  }
}

// The 16-bit mask keeps exactly the elements the float32 mask keeps.
TEST(LowPrecisionNative, DropoutMaskMatchesFloat32) {
  const Case c{"Dropout", {}, {{"p", "0.3"}, {"mode", "always"}, {"seed", "5"}, {"offset", "17"}}};
  const NDArray x = filled(Shape{64, 33}, 1.0f, DType::kFloat32);
  const std::vector<float> want = values(run_case(c, {x}, Device::cpu(0))[1]);
  for (DType t : kLow) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<float> got = values(run_case(c, {x.astype(t)}, Device::cpu(0))[1]);
    ASSERT_EQ(got.size(), want.size());
    int kept = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i] != 0, want[i] != 0) << "element " << i;
      kept += want[i] != 0;
    }
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, static_cast<int>(want.size()));
  }
}

}  // namespace
}  // namespace kiln
