// What a loaded ONNX model holds (internal to frontend/formats/onnx): the
// checked ModelProto and what was decoded from it once.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "frontend/formats/onnx/model.h"
#include "frontend/formats/onnx/tensor.h"

namespace kiln::onnx {

struct Model::State {
  pb::ModelProto proto;
  std::string source;  // the file (or the name given to parse)
  std::string folder;  // external data resolves here ("" refuses it)
  int64_t opset = 0;
  int64_t upgraded_from = 0;  // the file's opset when the version converter raised it
  std::vector<ValueInfo> inputs, outputs;
  ArrayMap initializers;
  std::set<std::string, std::less<>> params, aux;
};

// Model::to_graph's work (frontend/formats/onnx/import_graph.cc).
Imported build_graph(const Model::State& state, std::span<const TensorType> input_types, std::span<const NDArray> known);

}  // namespace kiln::onnx
