#include "frontend/formats/onnx/tensor.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/ranges.h>

namespace kiln::onnx {

static_assert(std::endian::native == std::endian::little, "ONNX raw_data is little-endian; add byte swapping");

namespace fs = std::filesystem;

std::optional<DType> dtype_from_onnx(int32_t data_type) {
  switch (data_type) {
    case pb::TensorProto::FLOAT: return DType::kFloat32;
    case pb::TensorProto::UINT8: return DType::kUint8;
    case pb::TensorProto::INT8: return DType::kInt8;
    case pb::TensorProto::UINT16: return DType::kUint16;
    case pb::TensorProto::INT16: return DType::kInt16;
    case pb::TensorProto::INT32: return DType::kInt32;
    case pb::TensorProto::INT64: return DType::kInt64;
    case pb::TensorProto::BOOL: return DType::kBool;
    case pb::TensorProto::FLOAT16: return DType::kFloat16;
    case pb::TensorProto::DOUBLE: return DType::kFloat64;
    case pb::TensorProto::UINT32: return DType::kUint32;
    case pb::TensorProto::UINT64: return DType::kUint64;
    case pb::TensorProto::BFLOAT16: return DType::kBfloat16;
    default: return std::nullopt;
  }
}

std::string_view onnx_dtype_name(int32_t data_type) {
  if (!pb::TensorProto_DataType_IsValid(data_type)) return "an unknown data type";
  return pb::TensorProto_DataType_Name(static_cast<pb::TensorProto_DataType>(data_type));
}

namespace {

std::string tensor_label(const pb::TensorProto& t, std::string_view source) {
  return fmt::format("{}: tensor '{}'", source, t.name());
}

// The bytes [offset, offset + length) of `location` under `folder`.
std::string read_external(const pb::TensorProto& t, std::string_view source, const std::string& folder,
                          int64_t want_bytes) {
  std::string where = tensor_label(t, source);
  KILN_CHECK(!folder.empty(), ValueError, "{}: external data, but the model was not read from a file", where);
  std::string location;
  int64_t offset = 0, length = -1;
  for (const pb::StringStringEntryProto& kv : t.external_data()) {
    auto parse_int = [&](std::string_view what) {
      int64_t v = 0;
      try {
        size_t used = 0;
        v = std::stoll(kv.value(), &used);
        KILN_CHECK(used == kv.value().size() && v >= 0, ValueError, "");
      } catch (const std::exception&) {
        throw ValueError(fmt::format("{}: external data {} '{}' is not a byte count", where, what, kv.value()));
      }
      return v;
    };
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = parse_int("offset");
    else if (kv.key() == "length") length = parse_int("length");
  }
  KILN_CHECK(!location.empty(), ValueError, "{}: external data without a location", where);
  fs::path rel(location);
  KILN_CHECK(rel.is_relative() && !rel.has_root_name(), ValueError,
             "{}: external data location '{}' is absolute; it must name a file in the model's folder", where,
             location);
  for (const fs::path& part : rel) {
    KILN_CHECK(part != "..", ValueError, "{}: external data location '{}' leaves the model's folder", where,
               location);
  }
  std::error_code ec;
  fs::path base = fs::canonical(folder, ec);
  KILN_CHECK(!ec, IOError, "{}: cannot resolve the model's folder '{}': {}", where, folder, ec.message());
  fs::path file = fs::weakly_canonical(base / rel, ec);
  KILN_CHECK(!ec, IOError, "{}: cannot resolve external data '{}': {}", where, location, ec.message());
  auto [b, f] = std::mismatch(base.begin(), base.end(), file.begin(), file.end());
  KILN_CHECK(b == base.end() && f != file.end(), ValueError,
             "{}: external data location '{}' resolves to {}, outside the model's folder {}", where, location,
             file.string(), base.string());
  KILN_CHECK(fs::is_regular_file(file, ec), IOError, "{}: external data file {} is missing or not a regular file",
             where, file.string());
  auto size = static_cast<int64_t>(fs::file_size(file, ec));
  KILN_CHECK(!ec, IOError, "{}: cannot read the size of {}: {}", where, file.string(), ec.message());
  if (length < 0) length = want_bytes;
  KILN_CHECK(length == want_bytes, ValueError, "{}: external data length {} does not match its shape and dtype ({} bytes)",
             where, length, want_bytes);
  KILN_CHECK(offset <= size && length <= size - offset, ValueError,
             "{}: external data [{}, {}) lies past the end of {} ({} bytes)", where, offset, offset + length,
             file.string(), size);
  std::string bytes(static_cast<size_t>(length), '\0');
  std::ifstream in(file, std::ios::binary);
  in.seekg(offset);
  in.read(bytes.data(), length);
  KILN_CHECK(in.gcount() == length, IOError, "{}: read {} of {} bytes from {}", where, in.gcount(), length,
             file.string());
  return bytes;
}

template <typename Field>
void check_count(const Field& f, int64_t count, std::string_view field, const std::string& where) {
  KILN_CHECK(static_cast<int64_t>(f.size()) == count, ValueError, "{}: {} holds {} values, its shape needs {}", where,
             field, f.size(), count);
}

// Writes typed-field values into `out` (count elements of dtype t).
void copy_typed(const pb::TensorProto& t, DType dtype, int64_t count, void* out, const std::string& where) {
  auto cast_all = [&](const auto& field, std::string_view name) {
    check_count(field, count, name, where);
    dispatch_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      T* dst = static_cast<T*>(out);
      for (int64_t i = 0; i < count; ++i) {
        if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          dst[i] = T{static_cast<uint16_t>(field.Get(static_cast<int>(i)))};  // stored as their bits
        } else {
          dst[i] = static_cast<T>(field.Get(static_cast<int>(i)));
        }
      }
    });
  };
  switch (t.data_type()) {
    case pb::TensorProto::FLOAT: cast_all(t.float_data(), "float_data"); break;
    case pb::TensorProto::DOUBLE: cast_all(t.double_data(), "double_data"); break;
    case pb::TensorProto::INT64: cast_all(t.int64_data(), "int64_data"); break;
    case pb::TensorProto::UINT32:
    case pb::TensorProto::UINT64: cast_all(t.uint64_data(), "uint64_data"); break;
    default: cast_all(t.int32_data(), "int32_data"); break;  // the smaller integers, bool, float16, bfloat16
  }
}

}  // namespace

NDArray decode_tensor(const pb::TensorProto& t, std::string_view source, const std::string& folder) {
  std::string where = tensor_label(t, source);
  KILN_CHECK(!t.has_segment(), NotSupported, "{}: segmented tensors are not supported", where);
  std::optional<DType> dtype = dtype_from_onnx(t.data_type());
  if (!dtype) {
    bool known = t.data_type() == pb::TensorProto::STRING || t.data_type() == pb::TensorProto::COMPLEX64 ||
                 t.data_type() == pb::TensorProto::COMPLEX128;
    if (known) throw NotSupported(fmt::format("{}: data type {} is not supported", where, onnx_dtype_name(t.data_type())));
    throw ValueError(fmt::format("{}: invalid data type {}", where, t.data_type()));
  }
  KILN_CHECK(t.dims_size() <= Shape::kMaxNdim, NotSupported, "{}: {} dims, Kiln arrays have at most {}", where,
             t.dims_size(), Shape::kMaxNdim);
  const auto elem = static_cast<int64_t>(dtype_size(*dtype));
  int64_t count = 1;
  std::vector<int64_t> dims;
  for (int64_t d : t.dims()) {
    KILN_CHECK(d >= 0, ValueError, "{}: negative dim {}", where, d);
    KILN_CHECK(d == 0 || count <= kMaxTensorBytes / elem / d, ValueError, "{}: dims {} exceed the {} GiB limit", where,
               fmt::join(t.dims(), "x"), kMaxTensorBytes >> 30);
    count *= d;
    dims.push_back(d);
  }
  const int64_t nbytes = count * elem;
  // The data's size is checked before the array is allocated: dims alone never allocate.
  if (t.data_location() == pb::TensorProto::EXTERNAL) {
    std::string bytes = read_external(t, source, folder, nbytes);
    NDArray a = NDArray::empty(Shape(dims), {*dtype, Device::cpu(0)});
    if (nbytes > 0) std::memcpy(a.data(), bytes.data(), bytes.size());
    return a;
  }
  if (t.has_raw_data()) {
    KILN_CHECK(static_cast<int64_t>(t.raw_data().size()) == nbytes, ValueError,
               "{}: raw_data holds {} bytes, its shape {} and dtype {} need {}", where, t.raw_data().size(),
               Shape(dims), dtype_name(*dtype), nbytes);
    NDArray a = NDArray::empty(Shape(dims), {*dtype, Device::cpu(0)});
    if (nbytes > 0) std::memcpy(a.data(), t.raw_data().data(), t.raw_data().size());  // fresh: no queued work
    return a;
  }
  const int64_t values = std::max({t.float_data_size(), t.int32_data_size(), t.int64_data_size(),
                                   t.double_data_size(), t.uint64_data_size()});
  KILN_CHECK(values == count, ValueError, "{}: holds {} values, its shape {} needs {}", where, values, Shape(dims), count);
  NDArray a = NDArray::empty(Shape(dims), {*dtype, Device::cpu(0)});
  copy_typed(t, *dtype, count, a.data(), where);
  return a;
}

}  // namespace kiln::onnx
