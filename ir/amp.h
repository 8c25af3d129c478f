// The mixed-precision policy as one function, applied by autocast at invoke
// (frontend/amp.h) and by the amp-cast pass (passes/amp_cast.h) alike, so
// imperative and compiled execution cast the same inputs to the same dtypes.
//
//   std::vector<DType> want = amp_input_dtypes(op_def(OpId::kFullyConnected), {kF32, kF32, kF32}, DType::kBfloat16);
//   // want == {bf16, bf16, bf16}: cast each input whose dtype differs
//
// Rules (OpDef::amp, OpDef::amp_float32_inputs; the lists: ir/ops/amp_policy.cc):
//  - inputs the op keeps in float32 are cast to float32;
//  - kLow: floating inputs are cast to the 16-bit type (float64 stays: it was asked for);
//  - kFloat32: 16-bit inputs are cast to float32;
//  - kPromote: floating inputs are cast to the widest floating dtype among
//    them (float16 with bfloat16 meets in float32);
//  - kFollow, and every non-floating input: unchanged.
#pragma once

#include <span>
#include <vector>

#include "ir/op.h"

namespace kiln {

bool is_16bit_float(DType t);  // float16, bfloat16

// The dtype each input should have when `def` runs under the policy for
// `low` (float16 or bfloat16); equal to the input's own where no cast is due.
std::vector<DType> amp_input_dtypes(const OpDef& def, std::span<const DType> inputs, DType low);

}  // namespace kiln
