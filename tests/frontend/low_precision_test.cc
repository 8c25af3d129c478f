// Every op of the registry in float16 and bfloat16 against its float32
// result, on the same inputs (rounded to the 16-bit type first, so the only
// difference is the computation). Floating inputs become 16-bit except those
// the op keeps in float32 (OpDef::amp_float32_inputs); ops without any
// floating input get the 16-bit dtype through their `dtype` attribute.
// Tolerance per dtype: two roundings of the output (a 16-bit result is the
// float32 result rounded once; accumulation is float32), relative to the
// element and to the output's largest magnitude, plus the case's own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "runtime/kernel.h"
#include "tests/op_cases.h"

namespace kiln {
namespace {

using namespace op_cases;

// Ops that do not take 16-bit floats, with the reason.
const std::map<std::string, std::string>& not_16bit() {
  static const std::map<std::string, std::string> m = {
      {"sgd_update", "optimizer updates run on float32 master weights"},
      {"sgd_mom_update", "optimizer updates run on float32 master weights"},
      {"nag_mom_update", "optimizer updates run on float32 master weights"},
      {"adam_update", "optimizer updates run on float32 master weights"},
      {"adamw_update", "optimizer updates run on float32 master weights"},
  };
  return m;
}

bool is_init(const OpDef& def) {
  return def.id == OpId::kZeros || def.id == OpId::kOnes || def.id == OpId::kFull || def.id == OpId::kArange ||
         def.id == OpId::kRandomUniform || def.id == OpId::kRandomNormal;
}

void run_all(DType low) {
  const std::string_view low_name = dtype_name(low);
  std::mt19937 rng(11);
  int compared = 0;
  for (const Case& c : cases()) {
    const OpDef& def = *find_op(c.op);
    std::vector<NDArray> inputs;
    for (const InputSpec& s : c.inputs) inputs.push_back(make_input(s, rng));
    if (not_16bit().count(std::string(def.name))) continue;
    Case wide = c, narrow = c;
    std::vector<NDArray> wide_in, narrow_in;
    bool any_float = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const NDArray& x = inputs[i];
      if (!is_floating(x.dtype()) || def.keeps_float32(i)) {
        wide_in.push_back(x);
        narrow_in.push_back(x);
        continue;
      }
      any_float = true;
      NDArray rounded = x.astype(low);
      narrow_in.push_back(rounded);
      wide_in.push_back(rounded.astype(DType::kFloat32));
    }
    // Embedding's dtype attribute names its weight's dtype.
    if (def.id == OpId::kEmbedding) narrow.attrs["dtype"] = std::string(dtype_name(low));
    if (!any_float) {
      if (!is_init(def)) continue;  // e.g. integer-only cases
      auto it = c.attrs.find("dtype");
      if (it != c.attrs.end() && it->second != "float32") continue;
      narrow.attrs["dtype"] = std::string(dtype_name(low));
    }
    std::vector<NDArray> want, got;
    try {
      want = run_case(wide, wide_in, Device::cpu(0));
      got = run_case(narrow, narrow_in, Device::cpu(0));
    } catch (const std::exception& e) {
      ADD_FAILURE() << describe(c) << " in " << low_name << ": " << e.what();
      continue;
    }
    expect_close_16bit(c, low, want, got, "float32", low_name);
    ++compared;
  }
  std::cout << "[ " << low_name << " ] " << compared << " cases compared with float32\n";
  EXPECT_GT(compared, 100);
}

TEST(LowPrecision, EveryOpInBfloat16MatchesFloat32) { run_all(DType::kBfloat16); }
TEST(LowPrecision, EveryOpInFloat16MatchesFloat32) { run_all(DType::kFloat16); }

// Every op with a CPU kernel has a case in tests/op_cases.h (so neither this
// walk nor the GPU parity walk can skip it).
TEST(Cases, EveryOpWithACpuKernelHasACase) {
  std::set<std::string> covered;
  for (const Case& c : cases()) {
    const OpDef* def = find_op(c.op);
    ASSERT_NE(def, nullptr) << "case for unknown op " << c.op;
    covered.insert(std::string(def->name));
  }
  std::vector<std::string> missing;
  for (const OpDef& def : all_ops()) {
    std::string name(def.name);
    if (has_kernel(def.id, DeviceKind::kCPU) && !covered.count(name) && !no_case().count(name))
      missing.push_back(name);
  }
  EXPECT_TRUE(missing.empty()) << "ops with a CPU kernel but no case (add one to tests/op_cases.h): "
                               << fmt::format("{}", fmt::join(missing, ", "));
}

// The dtypes of the 16-bit results are the 16-bit type (or float32 where the
// op keeps it), never silently float32.
TEST(LowPrecision, ResultsKeepTheirDtype) {
  NDArray x = nd::array<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3}).astype(DType::kBfloat16);
  NDArray w = nd::array<float>({1, 0, 0, 1, 1, 1}, Shape{2, 3}).astype(DType::kBfloat16);
  EXPECT_EQ(nd::dot(x, w, false, true).dtype(), DType::kBfloat16);
  EXPECT_EQ(nd::relu(x).dtype(), DType::kBfloat16);
  EXPECT_EQ(nd::sum(x).dtype(), DType::kBfloat16);
}

}  // namespace
}  // namespace kiln
