// infer-shape: gives input/param/aux nodes new types and infers every op
// node's output types again, through the same OpDef::infer that eager invoke
// uses.
//
//   ir::Graph g32 = passes::retype(g, {{"data", {Shape{32, 784}, DType::kFloat32}}});
//
// Nodes not named keep their types. Attributes are not rewritten, so ops
// whose attributes fix a shape (Reshape to a literal shape, _zeros) keep it
// and may then fail to fit. A node that does not fit its new input types
// throws the inference error (ShapeError, TypeError, ...) prefixed with the
// node's name and its op with the input types:
//   "node 'fc1': FullyConnected(f32[32,100], f32[8,5], f32[8]): ..."
// Names in `input_types` that are not input/param/aux nodes throw ValueError.
// Preserves node order, names, ops, attributes and outputs.
#pragma once

#include <string>
#include <unordered_map>

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

ir::Graph retype(const ir::Graph& g, const std::unordered_map<std::string, TensorType>& input_types);

// The pipeline pass "infer-shape": retype with ctx.options.infer_shape.input_types.
// PassStats::rewritten counts the nodes whose types changed.
ir::Graph infer_shape(const ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
