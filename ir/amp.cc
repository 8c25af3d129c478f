#include "ir/amp.h"

namespace kiln {

bool is_16bit_float(DType t) { return t == DType::kFloat16 || t == DType::kBfloat16; }

namespace {

int width_rank(DType t) {
  switch (t) {
    case DType::kFloat64:
      return 3;
    case DType::kFloat32:
      return 2;
    default:
      return 1;  // 16-bit floats
  }
}

// The widest floating dtype among `inputs`; float16 with bfloat16 gives float32.
DType widest_float(std::span<const DType> inputs) {
  DType widest = DType::kBool;
  bool found = false;
  for (DType t : inputs) {
    if (!is_floating(t)) continue;
    if (!found) {
      widest = t;
      found = true;
    } else if (width_rank(t) > width_rank(widest)) {
      widest = t;
    } else if (width_rank(t) == 1 && width_rank(widest) == 1 && t != widest) {
      widest = DType::kFloat32;
    }
  }
  return widest;
}

}  // namespace

std::vector<DType> amp_input_dtypes(const OpDef& def, std::span<const DType> inputs, DType low) {
  KILN_ASSERT(is_16bit_float(low));
  std::vector<DType> want(inputs.begin(), inputs.end());
  const DType widest = def.amp == AmpPolicy::kPromote ? widest_float(inputs) : DType::kFloat32;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DType t = inputs[i];
    if (!is_floating(t)) continue;
    if (def.keeps_float32(i)) {
      want[i] = DType::kFloat32;
      continue;
    }
    switch (def.amp) {
      case AmpPolicy::kLow:
        if (t != DType::kFloat64) want[i] = low;
        break;
      case AmpPolicy::kFloat32:
        if (is_16bit_float(t)) want[i] = DType::kFloat32;
        break;
      case AmpPolicy::kPromote:
        want[i] = widest;
        break;
      case AmpPolicy::kFollow:
        break;
    }
  }
  return want;
}

}  // namespace kiln
