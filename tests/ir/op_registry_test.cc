// Every op in ir/op_list.def is complete: inference, attributes, a CPU kernel.
#include <gtest/gtest.h>

#include "ir/op.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

TEST(OpRegistry, EveryOpIsDefinedWithInferenceAndCpuKernel) {
  for (const OpDef& def : all_ops()) {
    SCOPED_TRACE(std::string(def.name));
    EXPECT_FALSE(def.name.empty());
    EXPECT_FALSE(def.doc.empty()) << def.name << " has no doc line";
    EXPECT_NE(def.infer, nullptr) << def.name << " has no shape/dtype inference";
    EXPECT_TRUE(has_kernel(def.id, DeviceKind::kCPU)) << def.name << " has no CPU kernel";
    if (def.num_inputs > 0) {
      EXPECT_EQ(def.input_names.size(), static_cast<size_t>(def.num_inputs)) << def.name;
    }
  }
}

TEST(OpRegistry, LookupByNameAndAlias) {
  const OpDef* d = find_op("_zeros");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->id, OpId::kZeros);
  EXPECT_EQ(find_op("zeros"), d);
  EXPECT_EQ(find_op("no_such_op"), nullptr);
  EXPECT_EQ(&op_def(OpId::kZeros), d);
}

TEST(OpRegistry, InferErrorsNameOpAndInputs) {
  const OpDef& def = op_def(OpId::kZeros);
  std::vector<TensorType> out;
  std::vector<TensorType> in{{Shape{2}, DType::kFloat32}};
  try {
    infer_types(def, {}, in, out);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("_zeros"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln
