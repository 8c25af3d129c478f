// Which model format a file holds, told by its content (not its name).
//
//   switch (formats::detect_model_format("net.onnx")) {
//     case formats::ModelFormat::kMxnetSymbolJson: ...   // frontend/formats/mxnet/
//     case formats::ModelFormat::kOnnx: ...              // frontend/formats/onnx/
//   }
//
// Each format lives in its own folder, frontend/formats/<format>/, and
// converts between its files and Kiln's neutral form (an ir::Graph plus
// named arrays, frontend/formats/named_arrays.h). A third format is one more
// folder, one more value here and one more branch in its callers
// (nn::SymbolBlock::imports, `kiln run`, `kiln inspect`).
//
// MXNet symbol JSON is text whose first non-blank character is '{'; an ONNX
// model is a protobuf onnx.ModelProto, whose first byte is the tag of one of
// its fields (ir_version, producer_name, ..., graph, opset_import). Anything
// else is a ValueError naming the file and the bytes found; IOError when the
// file cannot be read.
#pragma once

#include <string>
#include <string_view>

namespace kiln::formats {

enum class ModelFormat { kMxnetSymbolJson, kOnnx };

std::string_view model_format_name(ModelFormat f);  // "MXNet symbol JSON", "ONNX"
ModelFormat detect_model_format(const std::string& path);
// The same on a file's first bytes (at least 16 of them when the file has them).
ModelFormat detect_model_format(std::string_view head, std::string_view source);

}  // namespace kiln::formats
