#include "frontend/npy.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "frontend/atomic_file.h"

namespace kiln::npy {

static_assert(std::endian::native == std::endian::little, ".npy reading assumes a little-endian host");

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
// Headers longer than this are refused (NumPy writes well under 1 KiB).
constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 20;

struct Descr {
  std::string_view text;  // without the byte-order character
  DType dtype;
};
constexpr Descr kDescrs[] = {{"f4", DType::kFloat32}, {"f8", DType::kFloat64}, {"f2", DType::kFloat16},
                             {"u1", DType::kUint8},   {"i4", DType::kInt32},   {"i1", DType::kInt8},
                             {"i8", DType::kInt64},   {"b1", DType::kBool},    {"i2", DType::kInt16},
                             {"u2", DType::kUint16},  {"u4", DType::kUint32},  {"u8", DType::kUint64},
                             {"b2", DType::kBfloat16}};

[[noreturn]] void fail(std::string_view source, size_t at, const std::string& what) {
  throw IOError(fmt::format("{}: {} (at byte {})", source, what, at));
}

// The value text of `key` in the header dict: "'<f4'", "False", "(2, 3)".
std::string_view dict_value(std::string_view header, std::string_view key, std::string_view source, size_t at) {
  std::string quoted = fmt::format("'{}'", key);
  size_t k = header.find(quoted);
  if (k == std::string_view::npos) fail(source, at, fmt::format("the header has no {} key: {}", quoted, header));
  size_t colon = header.find(':', k + quoted.size());
  if (colon == std::string_view::npos) fail(source, at, fmt::format("malformed header: {}", header));
  size_t begin = colon + 1;
  while (begin < header.size() && header[begin] == ' ') ++begin;
  size_t end = begin;
  if (begin < header.size() && header[begin] == '(') {
    end = header.find(')', begin);
    if (end == std::string_view::npos) fail(source, at, fmt::format("malformed shape in header: {}", header));
    ++end;
  } else {
    while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  }
  std::string_view v = header.substr(begin, end - begin);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  return v;
}

}  // namespace

NDArray parse(std::string_view bytes, std::string_view source) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != kMagic) {
    fail(source, 0, "not a .npy file (no \\x93NUMPY magic)");
  }
  auto major = static_cast<uint8_t>(bytes[6]);
  size_t header_at;
  uint64_t header_len;
  if (major == 1) {
    uint16_t len;
    std::memcpy(&len, bytes.data() + 8, 2);
    header_len = len;
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(source, bytes.size(), "truncated in the header length");
    uint32_t len;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    header_at = 12;
  } else {
    fail(source, 6,
         fmt::format("format version {}.{} is not supported (1.0, 2.0 and 3.0 are)", major,
                     static_cast<int>(static_cast<uint8_t>(bytes[7]))));
  }
  if (header_len > kMaxHeaderBytes || header_len > bytes.size() - header_at) {
    fail(source, header_at,
         fmt::format("truncated: the header needs {} bytes, {} left", header_len, bytes.size() - header_at));
  }
  std::string_view header = bytes.substr(header_at, header_len);
  size_t data_at = header_at + header_len;

  std::string_view descr = dict_value(header, "descr", source, header_at);
  if (descr.size() < 4 || descr.front() != '\'' || descr.back() != '\'')
    fail(source, header_at, fmt::format("descr {} is not a simple dtype", descr));
  descr = descr.substr(1, descr.size() - 2);
  char order = descr[0];
  if (order == '>') throw NotSupported(fmt::format("{}: big-endian data ({}) is not supported", source, descr));
  if (order != '<' && order != '|' && order != '=')
    fail(source, header_at, fmt::format("descr '{}' has no byte-order character", descr));
  const Descr* found = nullptr;
  for (const Descr& d : kDescrs)
    if (d.text == descr.substr(1)) found = &d;
  if (found == nullptr) throw NotSupported(fmt::format("{}: dtype '{}' is not supported", source, descr));
  DType dtype = found->dtype;

  std::string_view fortran = dict_value(header, "fortran_order", source, header_at);
  if (fortran == "True") throw NotSupported(fmt::format("{}: Fortran-order arrays are not supported", source));
  if (fortran != "False") fail(source, header_at, fmt::format("fortran_order is '{}'", fortran));

  std::string_view shape_text = dict_value(header, "shape", source, header_at);
  std::vector<int64_t> dims;
  try {
    Shape parsed = parse_shape(shape_text);
    dims = parsed.to_vector();
  } catch (const Error& e) {
    fail(source, header_at, fmt::format("shape {}: {}", shape_text, e.message()));
  }
  // Size against the bytes left, without overflow.
  uint64_t left = bytes.size() - data_at, limit = left / dtype_size(dtype), count = 1;
  for (int64_t d : dims) {
    if (d == 0) {
      count = 0;
      break;
    }
    count = count > limit / static_cast<uint64_t>(d) ? limit + 1 : count * static_cast<uint64_t>(d);
  }
  if (count > limit)
    fail(source, data_at,
         fmt::format("truncated: shape {} of {} needs more than the {} bytes left", shape_text, dtype, left));
  if (count * dtype_size(dtype) != left)
    fail(source, data_at + count * dtype_size(dtype),
         fmt::format("{} bytes follow the values of shape {}", left - count * dtype_size(dtype), shape_text));
  NDArray a = NDArray::empty(Shape(dims), {dtype, Device::cpu(0)});
  if (count > 0) std::memcpy(a.data(), bytes.data() + data_at, count * dtype_size(dtype));
  return a;
}

std::string serialize(const NDArray& a) {
  KILN_CHECK(!a.is_none(), ValueError, "npy: cannot save a none array");
  NDArray host = a.device().is_cpu() ? a : a.copy_to(Device::cpu(0));
  host.wait_to_read();
  std::string_view code;
  for (const Descr& d : kDescrs)
    if (d.dtype == a.dtype()) code = d.text;
  KILN_CHECK(!code.empty(), NotSupported, "npy: dtype {} has no .npy descriptor", a.dtype());
  char order = dtype_size(a.dtype()) == 1 ? '|' : '<';
  std::string shape = "(";
  for (int i = 0; i < a.ndim(); ++i) shape += fmt::format("{}{}", i ? ", " : "", a.shape()[i]);
  if (a.ndim() == 1) shape += ",";
  shape += ")";
  std::string dict = fmt::format("{{'descr': '{}{}', 'fortran_order': False, 'shape': {}, }}", order, code, shape);
  bool v2 = dict.size() + 11 > 65535;
  size_t preamble = v2 ? 12 : 10;
  size_t total = (preamble + dict.size() + 1 + 63) / 64 * 64;  // +1 for the newline
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kMagic);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  if (v2) {
    auto len = static_cast<uint32_t>(dict.size());
    out.append(reinterpret_cast<const char*>(&len), 4);
  } else {
    auto len = static_cast<uint16_t>(dict.size());
    out.append(reinterpret_cast<const char*>(&len), 2);
  }
  out += dict;
  out.append(static_cast<const char*>(host.data()), host.nbytes());
  return out;
}

NDArray load(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  KILN_CHECK(!ec, IOError, "{}: cannot read: {}", path, ec.message());
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), IOError, "{}: cannot open for reading: {}", path, std::strerror(errno));
  std::string bytes(size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  KILN_CHECK(in.gcount() == static_cast<std::streamsize>(size), IOError, "{}: read {} of {} bytes", path, in.gcount(),
             size);
  return parse(bytes, path);
}

void save(const std::string& path, const NDArray& a) { write_file_atomically(path, serialize(a)); }

}  // namespace kiln::npy
