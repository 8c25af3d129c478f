// A hybridized block written as an ONNX model (frontend/formats/onnx/export.h).
//
//   net.hybridize();
//   net(x);                                     // traces the graph
//   nn::export_onnx(net, "net.onnx");           // opset 17; onnx::Model::load reads it back
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

void export_onnx(const HybridBlock& block, const std::string& path, int opset = onnx::kExportOpset);

}  // namespace kiln::nn
