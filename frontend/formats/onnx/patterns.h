// Multi-node ONNX patterns that Kiln has one op for, recognized before the
// nodes are converted (internal to frontend/formats/onnx).
//
//   std::vector<pb::NodeProto> nodes = fuse_patterns(model.graph(), initializers);
//
// GELU as PyTorch and others write it before opset 20's Gelu op:
// y = (x * (1 + Erf(x / sqrt(2)))) * 0.5, five nodes Div, Erf, Add, Mul, Mul
// (the constants 1.4142135..., 1 and 0.5 as Constant nodes or initializers,
// either operand order). The five become one node of op type "Gelu" named
// and outputting as the last Mul, when no other node (and no graph output)
// reads the intermediate values. Everything else is returned as it is, in
// order.
#pragma once

#include <vector>

#include "frontend/formats/named_arrays.h"
#include "frontend/formats/onnx/tensor.h"

namespace kiln::onnx {

std::vector<pb::NodeProto> fuse_patterns(const pb::GraphProto& g, const ArrayMap& initializers);

}  // namespace kiln::onnx
