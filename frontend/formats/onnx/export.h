// Kiln's neutral form (an ir::Graph plus the arrays of its param, aux and
// const nodes) written as an ONNX model.
//
//   std::string bytes = onnx::to_onnx(g, values);          // opset 17, checked
//   onnx::save_model("net.onnx", g, values);
//   onnx::Model back = onnx::Model::load("net.onnx");      // runs like g
//
// The graph's types are concrete, so the model has fixed shapes, unless
// ExportOptions::dynamic_batch makes dim 0 of every input and output the
// symbol "N" (the graph must keep the batch on axis 0: every Reshape keeps
// its input's dim 0, and every output starts with the batch; NotSupported
// naming the node otherwise). Reshape targets are written as the shapes the
// graph inferred (dim 0 as "copy" under dynamic_batch). Inputs, params, aux states and constants keep their node names
// (params, aux and consts become initializers, the running statistics of
// BatchNorm included), op outputs are named after their node ("name" for
// output 0, "name:k" after). Ops are written in inference semantics
// (BatchNorm with its moving statistics, Dropout as Identity), one ONNX op
// or a short chain each (frontend/formats/onnx/export.cc lists them); a Kiln
// op without an ONNX form is NotSupported naming the op and the node. The
// result passes onnx::checker::check_model and strict shape inference
// (InternalError otherwise: a bug in the exporter).
#pragma once

#include <map>
#include <string>

#include "frontend/formats/named_arrays.h"
#include "ir/graph.h"

namespace kiln::onnx {

inline constexpr int kExportOpset = 17;

using NameMap = std::map<std::string, std::string, std::less<>>;

struct ExportOptions {
  int opset = kExportOpset;  // 13 to 17
  NameMap input_names;       // input node name -> name in the file
  bool dynamic_batch = false;
};

// ValueError listing param/aux/const nodes `values` lacks, or for an opset
// outside [13, 17].
std::string to_onnx(const ir::Graph& g, const ArrayMap& values, const ExportOptions& options = {});
void save_model(const std::string& path, const ir::Graph& g, const ArrayMap& values, const ExportOptions& options = {});

}  // namespace kiln::onnx
