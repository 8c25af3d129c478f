#include "frontend/formats/model_format.h"

#include <fstream>

#include "ir/error.h"

namespace kiln::formats {

std::string_view model_format_name(ModelFormat f) {
  switch (f) {
    case ModelFormat::kMxnetSymbolJson: return "MXNet symbol JSON";
    case ModelFormat::kOnnx: return "ONNX";
  }
  return "?";
}

namespace {

// Protobuf tags (field number << 3 | wire type) of onnx.ModelProto's
// single-byte fields: varints 1 (ir_version) and 5 (model_version),
// length-delimited 2, 3, 4, 6 (strings), 7 (graph), 8 (opset_import), 14
// (metadata_props); 20 and 25 (training_info, functions) take two bytes.
bool is_model_proto_tag(unsigned char b0, unsigned char b1) {
  switch (b0) {
    case 0x08: case 0x28:                                       // varint fields 1, 5
    case 0x12: case 0x1a: case 0x22: case 0x32: case 0x3a:      // 2, 3, 4, 6, 7
    case 0x42: case 0x72:                                       // 8, 14
      return true;
    case 0xa2: case 0xca: return b1 == 0x01;                    // 20, 25
    default: return false;
  }
}

}  // namespace

ModelFormat detect_model_format(std::string_view head, std::string_view source) {
  size_t i = head.starts_with("\xEF\xBB\xBF") ? 3 : 0;  // a UTF-8 byte order mark
  while (i < head.size() && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t')) ++i;
  if (i < head.size() && head[i] == '{') return ModelFormat::kMxnetSymbolJson;
  if (!head.empty() && is_model_proto_tag(static_cast<unsigned char>(head[0]),
                                          head.size() > 1 ? static_cast<unsigned char>(head[1]) : 0))
    return ModelFormat::kOnnx;
  std::string shown;
  for (size_t k = 0; k < head.size() && k < 8; ++k) shown += fmt::format("{}{:02x}", k ? " " : "", static_cast<unsigned char>(head[k]));
  throw ValueError(fmt::format(
      "{}: not a model file Kiln reads: expected MXNet symbol JSON (text starting with '{{') or an ONNX model "
      "(a protobuf onnx.ModelProto), found {}",
      source, head.empty() ? std::string("an empty file") : "bytes " + shown));
}

ModelFormat detect_model_format(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), IOError, "{}: cannot open for reading", path);
  std::string head(64, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  return detect_model_format(head, path);
}

}  // namespace kiln::formats
