#include "frontend/formats/mxnet/params_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <fmt/ranges.h>

#include "frontend/atomic_file.h"

namespace kiln::mxnet {

static_assert(std::endian::native == std::endian::little, "params files are little-endian; add byte swapping");

namespace {

constexpr uint64_t kListMagic = 0x112;
constexpr uint32_t kV1Magic = 0xF993FAC8;
constexpr uint32_t kV2Magic = 0xF993FAC9;
constexpr uint32_t kV3Magic = 0xF993FACA;
constexpr uint32_t kZipLocalMagic = 0x04034b50;
constexpr uint32_t kZipEndMagic = 0x06054b50;

// ---- writing

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void put(const void* data, size_t n) = 0;
  template <typename T>
  void put_pod(T v) {
    put(&v, sizeof v);
  }
};

class StringSink final : public Sink {
 public:
  void put(const void* data, size_t n) override { out.append(static_cast<const char*>(data), n); }
  std::string out;
};

class FunctionSink final : public Sink {
 public:
  explicit FunctionSink(const std::function<void(std::string_view)>& f) : f_(f) {}
  void put(const void* data, size_t n) override { f_(std::string_view(static_cast<const char*>(data), n)); }

 private:
  const std::function<void(std::string_view)>& f_;
};

void write_all_arrays(Sink& sink, const NamedArrays& arrays) {
  sink.put_pod<uint64_t>(kListMagic);
  sink.put_pod<uint64_t>(0);
  sink.put_pod<uint64_t>(arrays.size());
  for (const auto& [name, a] : arrays) {
    if (a.is_none()) {  // MXNet's "none" record: V2 with ndim 0
      sink.put_pod<uint32_t>(kV2Magic);
      sink.put_pod<int32_t>(0);
      sink.put_pod<int32_t>(0);
      continue;
    }
    NDArray host = a.device().is_cpu() ? a : a.copy_to(Device::cpu(0));
    host.wait_to_read();
    sink.put_pod<uint32_t>(a.ndim() == 0 ? kV3Magic : kV2Magic);
    sink.put_pod<int32_t>(0);  // dense
    sink.put_pod<int32_t>(a.ndim());
    for (int64_t d : a.shape()) sink.put_pod<int64_t>(d);
    sink.put_pod<int32_t>(static_cast<int32_t>(a.device().kind));
    sink.put_pod<int32_t>(a.device().id);
    sink.put_pod<int32_t>(static_cast<int32_t>(a.dtype()));
    if (host.nbytes() > 0) sink.put(host.data(), host.nbytes());
  }
  bool named = false;
  for (const auto& [name, _] : arrays) named = named || !name.empty();
  sink.put_pod<uint64_t>(named ? arrays.size() : 0);
  if (!named) return;
  for (const auto& [name, _] : arrays) {
    sink.put_pod<uint64_t>(name.size());
    sink.put(name.data(), name.size());
  }
}

// ---- reading

class Reader {
 public:
  Reader(std::string_view bytes, std::string_view source) : bytes_(bytes), source_(source) {}

  size_t pos() const { return pos_; }
  size_t left() const { return bytes_.size() - pos_; }

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw IOError(fmt::format("{}: {} (at byte {} of {})", source_, what, at, bytes_.size()));
  }
  void need(size_t n, std::string_view what) const {
    if (left() < n) {
      throw IOError(fmt::format("{}: truncated at byte {}: {} needs {} bytes, {} left (file is {} bytes)", source_,
                                pos_, what, n, left(), bytes_.size()));
    }
  }
  template <typename T>
  T pod(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string_view take(size_t n, std::string_view what) {
    need(n, what);
    std::string_view s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  std::string_view bytes_;
  std::string_view source_;
  size_t pos_ = 0;
};

NDArray read_record(Reader& r, uint64_t index) {
  size_t start = r.pos();
  uint32_t magic = r.pod<uint32_t>("the record's magic");
  bool v3 = magic == kV3Magic, v2_or_v3 = magic == kV2Magic || v3, legacy_v0 = !v2_or_v3 && magic != kV1Magic;
  if (v2_or_v3) {
    size_t at = r.pos();
    int32_t stype = r.pod<int32_t>("the storage type");
    if (stype != 0) {
      throw NotSupported(
          fmt::format("array {} at byte {}: storage type {} (sparse) is not supported; only dense "
                      "arrays (type 0) load",
                      index, at, stype));
    }
  }
  // The shape: pre-V1 records have a u32 ndim (the "magic" just read) and u32 dims.
  size_t shape_at = legacy_v0 ? start : r.pos();
  int64_t ndim = legacy_v0 ? static_cast<int64_t>(magic) : r.pod<int32_t>("the number of dims");
  if (v3 && ndim == -1) return NDArray();  // unknown shape: "none"
  if (ndim < 0 || ndim > Shape::kMaxNdim) {
    r.fail(shape_at, fmt::format("array {} has {} dims; expected 0 to {}{}", index, ndim, Shape::kMaxNdim,
                                 legacy_v0 ? fmt::format(" (0x{:08x} is not a record magic either)", magic) : ""));
  }
  if (ndim == 0 && !v3) return NDArray();  // V2/V1/v0: ndim 0 means "none"
  std::vector<int64_t> dims(static_cast<size_t>(ndim));
  bool unknown = false;
  for (auto& d : dims) {
    size_t at = r.pos();
    d = legacy_v0 ? static_cast<int64_t>(r.pod<uint32_t>("a dim")) : r.pod<int64_t>("a dim");
    if (v3 && d == -1) {
      unknown = true;
    } else if (d < 0) {
      r.fail(at, fmt::format("array {} has a negative dim {}", index, d));
    }
  }
  if (unknown) return NDArray();
  r.pod<int32_t>("the device type");
  r.pod<int32_t>("the device id");
  size_t flag_at = r.pos();
  int32_t flag = r.pod<int32_t>("the dtype flag");
  DType dtype;
  try {
    dtype = dtype_from_flag(flag);
  } catch (const Error& e) {
    r.fail(flag_at, fmt::format("array {}: {}", index, e.message()));
  }
  // The data size, checked against the bytes left without overflowing.
  uint64_t limit = r.left() / dtype_size(dtype), count = 1;
  for (int64_t d : dims) {
    if (d == 0) {
      count = 0;
      break;
    }
    if (count > limit / static_cast<uint64_t>(d) + 1)
      count = limit + 1;  // saturate: surely too big
    else
      count *= static_cast<uint64_t>(d);
  }
  Shape shape;
  try {
    shape = Shape(dims);
  } catch (const Error& e) {
    r.fail(shape_at, fmt::format("array {}: {}", index, e.message()));
  }
  if (count > limit) {
    double bytes = static_cast<double>(dtype_size(dtype));
    for (int64_t d : dims) bytes *= static_cast<double>(d);
    r.fail(r.pos(), fmt::format("truncated: the values of array {} (shape {}, {}) need {:.0f} bytes, {} left", index,
                                shape, dtype, bytes, r.left()));
  }
  std::string_view data = r.take(count * dtype_size(dtype), "the values");
  NDArray a = NDArray::empty(shape, {dtype, Device::cpu(0)});
  if (!data.empty()) std::memcpy(a.data(), data.data(), data.size());  // fresh: no queued work touches it
  return a;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), IOError, "{}: cannot open for reading: {}", path, std::strerror(errno));
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  KILN_CHECK(!ec, IOError, "{}: cannot read the size: {}", path, ec.message());
  std::string bytes(size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  KILN_CHECK(in.gcount() == static_cast<std::streamsize>(size), IOError, "{}: read {} of {} bytes", path, in.gcount(),
             size);
  return bytes;
}

}  // namespace

void write_ndarrays(const NamedArrays& arrays, const std::function<void(std::string_view)>& put) {
  FunctionSink sink(put);
  write_all_arrays(sink, arrays);
}

std::string serialize_ndarrays(const NamedArrays& arrays) {
  StringSink sink;
  write_all_arrays(sink, arrays);
  return std::move(sink.out);
}

NamedArrays parse_ndarrays(std::string_view bytes, std::string_view source) {
  Reader r(bytes, source);
  if (bytes.size() >= 4) {
    uint32_t first;
    std::memcpy(&first, bytes.data(), 4);
    if (first == kZipLocalMagic || first == kZipEndMagic) {
      throw NotSupported(
          fmt::format("{}: a ZIP archive (MXNet 2.0's npx.savez .npz params), which Kiln does not "
                      "read; save it with mx.nd.save (the NDArray-list format) instead",
                      source));
    }
  }
  uint64_t header = r.pod<uint64_t>("the header");
  if (header != kListMagic)
    r.fail(0, fmt::format("not an MXNet NDArray-list file: header 0x{:x}, expected 0x112", header));
  r.pod<uint64_t>("the reserved word");
  size_t count_at = r.pos();
  uint64_t count = r.pod<uint64_t>("the array count");
  if (count > r.left() / 4) {  // every record takes at least 4 bytes
    r.fail(count_at, fmt::format("array count {} is more than the {} bytes left can hold", count, r.left()));
  }
  NamedArrays out;
  out.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    try {
      out.emplace_back(std::string(), read_record(r, i));
    } catch (NotSupported& e) {
      e.add_context(std::string(source));
      throw;
    }
  }
  size_t names_at = r.pos();
  uint64_t n_names = r.pod<uint64_t>("the name count");
  if (n_names != 0 && n_names != count) {
    r.fail(names_at, fmt::format("{} names for {} arrays (expected 0 or {})", n_names, count, count));
  }
  for (uint64_t i = 0; i < n_names; ++i) {
    size_t at = r.pos();
    uint64_t len = r.pod<uint64_t>("a name's length");
    if (len > r.left()) r.fail(at, fmt::format("name {} is {} bytes long, only {} left", i, len, r.left()));
    out[i].first = std::string(r.take(len, "a name"));
  }
  return out;
}

void save_ndarrays(const std::string& path, const NamedArrays& arrays) {
  write_file_atomically(path, [&](const ByteSink& put) { write_ndarrays(arrays, put); });
}

NamedArrays load_ndarrays(const std::string& path) { return parse_ndarrays(read_file(path), path); }

}  // namespace kiln::mxnet
