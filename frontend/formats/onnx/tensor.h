// onnx.TensorProto <-> arrays (internal to frontend/formats/onnx: includes
// libonnx's protobuf classes, which Kiln's public headers never do).
//
//   NDArray a = onnx::decode_tensor(t, "model.onnx", folder);   // cpu(0)
//
// decode_tensor checks before allocating: the dtype is one Kiln has, every
// dim is >= 0 and the element count fits kMaxTensorBytes; raw_data holds
// exactly count x element size bytes; a typed field (float_data, int32_data,
// int64_data, double_data, uint64_data) holds exactly count values; external
// data (location, offset, length) lies inside a regular file under `folder`.
// Errors are ValueError (NotSupported for strings and complex numbers) naming
// `source` and the tensor.
#pragma once

#include <onnx/onnx_pb.h>

#include <optional>
#include <string>
#include <string_view>

#include "frontend/ndarray.h"

namespace kiln::onnx {

namespace pb = ::onnx;

// Larger tensors are refused (the model file itself is at most kMaxModelBytes).
inline constexpr int64_t kMaxTensorBytes = int64_t{16} << 30;

// Kiln's dtype for an ONNX TensorProto.DataType; nullopt for those Kiln lacks.
std::optional<DType> dtype_from_onnx(int32_t data_type);
std::string_view onnx_dtype_name(int32_t data_type);

// `folder` empty: external data is refused.
NDArray decode_tensor(const pb::TensorProto& t, std::string_view source, const std::string& folder);

}  // namespace kiln::onnx
