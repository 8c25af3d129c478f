#include "frontend/train/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include <fmt/ranges.h>

#include "ir/error.h"

namespace kiln::train {

static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian; add byte swapping");

namespace {

constexpr std::string_view kMagic = "KILNCKPT";
constexpr uint32_t kFlagRequired = 1;
constexpr uint32_t kKnownFlags = kFlagRequired;

bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > kCheckpointMaxNameBytes) return false;
  return std::all_of(n.begin(), n.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == ':'; });
}

uint32_t crc32_update(uint32_t crc, std::string_view bytes) {
  uLong c = crc;
  // zlib takes uInt lengths: feed large pieces in parts.
  while (!bytes.empty()) {
    size_t n = std::min<size_t>(bytes.size(), 1u << 30);
    c = ::crc32(c, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<uint32_t>(c);
}

uint32_t crc32_of(std::string_view bytes) { return crc32_update(static_cast<uint32_t>(::crc32(0L, Z_NULL, 0)), bytes); }

template <typename T>
void put_pod(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Bounds-checked reading; every failure names the file and the byte offset.
class Reader {
 public:
  Reader(std::string_view bytes, std::string_view name) : bytes_(bytes), name_(name) {}
  size_t pos() const { return pos_; }
  size_t left() const { return bytes_.size() - pos_; }
  std::string_view bytes() const { return bytes_; }

  [[noreturn]] void fail(size_t at, std::string_view what) const {
    throw IOError(fmt::format("{}: {} (at byte {} of {})", name_, what, at, bytes_.size()));
  }
  std::string_view take(size_t n, std::string_view what) {
    if (left() < n) {
      throw IOError(fmt::format("{}: truncated at byte {}: {} needs {} bytes, {} left (file is {} bytes)", name_, pos_,
                                what, n, left(), bytes_.size()));
    }
    std::string_view s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  template <typename T>
  T pod(std::string_view what) {
    T v;
    std::memcpy(&v, take(sizeof v, what).data(), sizeof v);
    return v;
  }

 private:
  std::string_view bytes_;
  std::string_view name_;
  size_t pos_ = 0;
};

}  // namespace

void Checkpoint::add(std::string name, NamedArrays arrays, bool required) {
  KILN_CHECK(valid_name(name), ValueError,
             "Checkpoint::add: section name '{}' must be 1 to {} characters of [a-z0-9_:]", name,
             kCheckpointMaxNameBytes);
  KILN_CHECK(!has(name), ValueError, "Checkpoint::add: section '{}' is already present", name);
  KILN_CHECK(sections.size() < kCheckpointMaxSections, ValueError, "Checkpoint::add: more than {} sections",
             kCheckpointMaxSections);
  sections.push_back({std::move(name), required, std::move(arrays)});
}

bool Checkpoint::has(std::string_view name) const {
  return std::any_of(sections.begin(), sections.end(), [&](const CheckpointSection& s) { return s.name == name; });
}

const NamedArrays& Checkpoint::section(std::string_view name, std::string_view source) const {
  for (const CheckpointSection& s : sections) {
    if (s.name == name) return s.arrays;
  }
  std::vector<std::string> names;
  for (const CheckpointSection& s : sections) names.push_back(s.name);
  throw IOError(fmt::format("{}: no section '{}' (the file has: {})", source, name, fmt::join(names, ", ")));
}

void write_checkpoint(const Checkpoint& c, const std::function<void(std::string_view)>& out) {
  KILN_CHECK(c.sections.size() <= kCheckpointMaxSections, ValueError, "checkpoint: {} sections, at most {}",
             c.sections.size(), kCheckpointMaxSections);
  uint32_t file_crc = crc32_of({});
  auto put = [&](std::string_view bytes) {
    file_crc = crc32_update(file_crc, bytes);
    out(bytes);
  };
  std::string head(kMagic);
  put_pod<uint32_t>(head, c.version);
  put_pod<uint32_t>(head, static_cast<uint32_t>(c.sections.size()));
  put(head);
  for (const CheckpointSection& s : c.sections) {
    KILN_CHECK(valid_name(s.name), ValueError, "checkpoint: section name '{}' must be 1 to {} characters of [a-z0-9_:]",
               s.name, kCheckpointMaxNameBytes);
    // The payload's length and crc32 come first in the file: a pass that only counts.
    uint64_t size = 0;
    uint32_t crc = crc32_of({});
    mxnet::write_ndarrays(s.arrays, [&](std::string_view bytes) {
      size += bytes.size();
      crc = crc32_update(crc, bytes);
    });
    std::string h;
    put_pod<uint32_t>(h, static_cast<uint32_t>(s.name.size()));
    h += s.name;
    put_pod<uint32_t>(h, s.required ? kFlagRequired : 0u);
    put_pod<uint64_t>(h, size);
    put_pod<uint32_t>(h, crc);
    put(h);
    uint64_t written = 0;
    mxnet::write_ndarrays(s.arrays, [&](std::string_view bytes) {
      written += bytes.size();
      put(bytes);
    });
    KILN_ASSERT(written == size);  // the arrays did not change between the passes
  }
  std::string tail;
  put_pod<uint32_t>(tail, file_crc);
  out(tail);
}

std::string serialize_checkpoint(const Checkpoint& c) {
  std::string out;
  write_checkpoint(c, [&](std::string_view bytes) { out.append(bytes); });
  return out;
}

Checkpoint parse_checkpoint(std::span<const std::byte> raw, std::string_view name) {
  std::string_view bytes(reinterpret_cast<const char*>(raw.data()), raw.size());
  Reader r(bytes, name);
  std::string_view magic = bytes.substr(0, kMagic.size());
  if (magic != kMagic) {
    std::string found;
    for (char ch : magic) found += (ch >= 0x20 && ch < 0x7f) ? std::string(1, ch) : fmt::format("\\x{:02x}", ch & 0xff);
    r.fail(0, fmt::format("not a Kiln checkpoint: expected the magic \"{}\", found \"{}\"{}", kMagic, found,
                          bytes.size() < kMagic.size() ? " (the file is shorter than the magic)" : ""));
  }
  r.take(kMagic.size(), "the magic");
  Checkpoint c;
  size_t version_at = r.pos();
  c.version = r.pod<uint32_t>("the format version");
  if (c.version == 0 || c.version > kCheckpointVersion) {
    r.fail(version_at,
           fmt::format("format version {}: this Kiln reads versions 1 to {}{}", c.version, kCheckpointVersion,
                       c.version > kCheckpointVersion ? " (written by a newer Kiln?)" : ""));
  }
  size_t count_at = r.pos();
  uint32_t count = r.pod<uint32_t>("the section count");
  if (count > kCheckpointMaxSections) {
    r.fail(count_at, fmt::format("{} sections; expected at most {}", count, kCheckpointMaxSections));
  }
  struct Raw {
    std::string name;
    bool required;
    std::string_view payload;
    size_t at;
  };
  std::vector<Raw> raws;
  for (uint32_t i = 0; i < count; ++i) {
    size_t at = r.pos();
    uint32_t len = r.pod<uint32_t>("a section name's length");
    if (len == 0 || len > kCheckpointMaxNameBytes) {
      r.fail(at, fmt::format("section {}: name length {}; expected 1 to {}", i, len, kCheckpointMaxNameBytes));
    }
    std::string sname(r.take(len, "a section name"));
    if (!valid_name(sname)) r.fail(at + 4, fmt::format("section {}: the name is not [a-z0-9_:] characters", i));
    for (const Raw& prev : raws) {
      if (prev.name == sname) r.fail(at, fmt::format("section '{}' appears twice", sname));
    }
    size_t flags_at = r.pos();
    uint32_t flags = r.pod<uint32_t>("a section's flags");
    if ((flags & ~kKnownFlags) != 0) {
      r.fail(flags_at,
             fmt::format("section '{}': unknown flags 0x{:x}; expected bits of 0x{:x}", sname, flags, kKnownFlags));
    }
    size_t size_at = r.pos();
    uint64_t size = r.pod<uint64_t>("a section's payload length");
    uint32_t crc = r.pod<uint32_t>("a section's crc32");
    if (size > r.left()) {
      r.fail(size_at, fmt::format("truncated: section '{}' holds {} bytes, {} left", sname, size, r.left()));
    }
    size_t payload_at = r.pos();
    std::string_view payload = r.take(static_cast<size_t>(size), "a section's payload");
    uint32_t computed = crc32_of(payload);
    if (computed != crc) {
      r.fail(payload_at, fmt::format("section '{}' is corrupt: crc32 0x{:08x} expected (stored at byte {}), the {} "
                                     "bytes give 0x{:08x}",
                                     sname, crc, size_at + 8, size, computed));
    }
    raws.push_back({std::move(sname), (flags & kFlagRequired) != 0, payload, payload_at});
  }
  size_t crc_at = r.pos();
  uint32_t stored = r.pod<uint32_t>("the file's crc32");
  uint32_t computed = crc32_of(bytes.substr(0, crc_at));
  if (stored != computed) {
    r.fail(crc_at, fmt::format("corrupt: file crc32 0x{:08x} expected, the first {} bytes give 0x{:08x}", stored,
                               crc_at, computed));
  }
  if (r.left() != 0) r.fail(r.pos(), fmt::format("{} unexpected bytes after the end of the checkpoint", r.left()));
  for (Raw& s : raws) {
    std::string source = fmt::format("{}: section '{}' (payload at byte {})", name, s.name, s.at);
    c.sections.push_back({std::move(s.name), s.required, mxnet::parse_ndarrays(s.payload, source)});
  }
  return c;
}

Checkpoint read_checkpoint(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KILN_CHECK(fd >= 0, IOError, "{}: cannot open for reading: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw IOError(fmt::format("{}: cannot read the size: {}", path, std::strerror(err)));
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return parse_checkpoint({}, path);
  }
  // Mapped rather than read: a large checkpoint is not copied once more.
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  KILN_CHECK(p != MAP_FAILED, IOError, "{}: cannot map its {} bytes: {}", path, size, std::strerror(err));
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { ::munmap(p, n); }
  } unmap{p, size};
  return parse_checkpoint(std::span(static_cast<const std::byte*>(p), size), path);
}

}  // namespace kiln::train
