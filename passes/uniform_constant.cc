#include "passes/uniform_constant.h"

#include "ir/ops/init.h"

namespace kiln::passes {

std::optional<double> uniform_value(const ir::Graph& g, ir::Entry e) {
  const ir::Node& n = g.node(e.node);
  if (!n.is_op()) return std::nullopt;
  double v = 0;
  switch (n.op) {
    case OpId::kZeros:
      v = 0;
      break;
    case OpId::kOnes:
      v = 1;
      break;
    case OpId::kFull:
      v = n.attrs.as<FullAttrs>().value;
      break;
    default:
      return std::nullopt;
  }
  // The value as the array stores it.
  switch (n.types[0].dtype) {
    case DType::kFloat64:
      return v;
    case DType::kFloat32:
      return static_cast<double>(static_cast<float>(v));
    default:
      return v == 0 || v == 1 ? std::optional<double>(v) : std::nullopt;
  }
}

}  // namespace kiln::passes
