// A hybridized block written as an ONNX model (frontend/formats/onnx/export.h).
//
//   net.hybridize();
//   net(x);                                     // traces the graph
//   nn::export_onnx(net, "net.onnx");           // opset 17; onnx::Model::load reads it back
//   nn::export_onnx(net, "any_batch.onnx", {.dynamic_batch = true});   // dim 0 is "N"
//
// The graph is the one traced for the last input signature (as export_model
// writes MXNet files), with the parameters' current values; shapes are those
// of that call; a SymbolBlock's inputs keep their names. ValueError when the block was not hybridized and run;
// NotSupported naming the node for ops without an ONNX form.
#pragma once

#include <string>

#include "frontend/formats/onnx/export.h"
#include "frontend/nn/block.h"

namespace kiln::nn {

// options.input_names is filled here for a SymbolBlock (its input names).
void export_onnx(const HybridBlock& block, const std::string& path, onnx::ExportOptions options = {});

}  // namespace kiln::nn
