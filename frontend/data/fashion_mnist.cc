#include "frontend/data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "frontend/nd_init.h"
#include "ir/error.h"

namespace kiln::data {
namespace {

constexpr uint32_t kImagesMagic = 2051;  // IDX: unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // IDX: unsigned byte, 1 dimension
constexpr int64_t kMaxSamples = 10'000'000;

constexpr size_t kImagesLimit = 16 + static_cast<size_t>(kMaxSamples) * FashionMNIST::kRows * FashionMNIST::kCols;
constexpr size_t kLabelsLimit = 8 + static_cast<size_t>(kMaxSamples);

uint32_t read_be32(const std::vector<uint8_t>& b, size_t offset) {
  return static_cast<uint32_t>(b[offset]) << 24 | static_cast<uint32_t>(b[offset + 1]) << 16 |
         static_cast<uint32_t>(b[offset + 2]) << 8 | b[offset + 3];
}

// The whole file's size as an IDX header declares it (magic 0 0 type ndim,
// then ndim big-endian u32 dims), once `b` holds the header; nullopt before,
// and SIZE_MAX when the product overflows.
std::optional<size_t> idx_declared_bytes(const std::vector<uint8_t>& b) {
  if (b.size() < 4) return std::nullopt;
  const size_t ndim = b[3], header = 4 + 4 * ndim;
  if (b.size() < header) return std::nullopt;
  size_t element = 1;  // type codes 0x08, 0x09 are bytes; 0x0B: 2; 0x0C, 0x0D: 4; 0x0E: 8
  if (b[2] == 0x0B) element = 2;
  if (b[2] == 0x0C || b[2] == 0x0D) element = 4;
  if (b[2] == 0x0E) element = 8;
  size_t n = element;
  for (size_t i = 0; i < ndim; ++i)
    if (__builtin_mul_overflow(n, size_t{read_be32(b, 4 + 4 * i)}, &n)) return SIZE_MAX;
  return n > SIZE_MAX - header ? SIZE_MAX : n + header;
}

struct Header {
  uint32_t count = 0;
  size_t data_offset = 0;
};

Header check_header(const std::vector<uint8_t>& b, std::string_view path, uint32_t magic) {
  size_t ndim = magic == kImagesMagic ? 3 : 1;
  size_t header = 4 + 4 * ndim;
  KILN_CHECK(b.size() >= header, IOError, "{}: file is {} bytes, shorter than its {}-byte IDX header", path,
             b.size(), header);
  uint32_t found = read_be32(b, 0);
  KILN_CHECK(found == magic, IOError, "{}: bad IDX magic number {} at byte 0 (expected {} for {})", path, found,
             magic, magic == kImagesMagic ? "images" : "labels");
  Header h{read_be32(b, 4), header};
  KILN_CHECK(h.count <= kMaxSamples, IOError, "{}: sample count {} at byte 4 exceeds the limit of {}", path, h.count,
             kMaxSamples);
  size_t per_sample = 1;
  if (ndim == 3) {
    uint32_t rows = read_be32(b, 8), cols = read_be32(b, 12);
    KILN_CHECK(rows == FashionMNIST::kRows && cols == FashionMNIST::kCols, IOError,
               "{}: images are {}x{} (bytes 8..15), expected {}x{}", path, rows, cols, FashionMNIST::kRows,
               FashionMNIST::kCols);
    per_sample = static_cast<size_t>(rows) * cols;
  }
  size_t expected = header + per_sample * h.count;
  KILN_CHECK(b.size() == expected, IOError, "{}: file holds {} bytes, but its header promises {} samples ({} bytes){}",
             path, b.size(), h.count, expected, b.size() < expected ? " — truncated" : "");
  return h;
}

}  // namespace

std::vector<uint8_t> decode_idx_bytes(std::span<const uint8_t> bytes, std::string_view source, size_t max_bytes) {
  auto is_gzip = [&](size_t at) { return bytes.size() - at >= 2 && bytes[at] == 0x1f && bytes[at + 1] == 0x8b; };
  if (!is_gzip(0)) {
    KILN_CHECK(bytes.size() <= max_bytes, IOError, "{}: {} bytes is over the {}-byte limit", source, bytes.size(),
               max_bytes);
    return {bytes.begin(), bytes.end()};
  }
  std::vector<uint8_t> out;
  std::vector<uint8_t> buf(size_t{1} << 16);
  z_stream z{};
  KILN_CHECK(inflateInit2(&z, 16 + MAX_WBITS) == Z_OK, OutOfMemory, "{}: zlib could not start inflating", source);
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  // Once the IDX header is out, output past the size it declares is an
  // error at once: a small file cannot make us inflate gigabytes.
  size_t limit = max_bytes;
  bool header_read = false;
  size_t at = 0;  // where the current member starts
  while (at < bytes.size()) {
    KILN_CHECK(is_gzip(at), IOError, "{}: {} bytes after the compressed data at byte {} are not a gzip member",
               source, bytes.size() - at, at);
    inflateReset(&z);
    z.next_in = const_cast<Bytef*>(bytes.data() + at);
    z.avail_in = 0;  // what the last member left unread starts this one: fed again from `at`
    size_t left = bytes.size() - at;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      if (z.avail_in == 0) {
        if (left == 0) break;
        z.avail_in = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
        left -= z.avail_in;
      }
      z.next_out = buf.data();
      z.avail_out = static_cast<uInt>(buf.size());
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
        const size_t offset = static_cast<size_t>(z.next_in - bytes.data());
        std::string msg = z.msg ? z.msg : "zlib error " + std::to_string(rc);
        throw IOError(fmt::format("{}: corrupt compressed data at byte {} ({}) after {} bytes of output", source,
                                  offset, msg, out.size()));
      }
      const size_t n = buf.size() - z.avail_out;
      if (out.size() + n > limit) {
        throw IOError(fmt::format("{}: inflates to more than {} bytes (at byte {} of the compressed data){}", source,
                                  limit, static_cast<size_t>(z.next_in - bytes.data()),
                                  header_read ? ", the size its IDX header declares" : ""));
      }
      out.insert(out.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
      if (!header_read) {
        if (auto declared = idx_declared_bytes(out)) {
          header_read = true;
          limit = std::min(limit, *declared);
          KILN_CHECK(out.size() <= limit, IOError,
                     "{}: inflates to more than the {} bytes its IDX header declares (at byte {} of the compressed "
                     "data)", source, limit, static_cast<size_t>(z.next_in - bytes.data()));
        }
      }
    }
    if (rc != Z_STREAM_END) {
      throw IOError(fmt::format("{}: compressed data truncated at byte {} (the gzip member starting at byte {} "
                                "does not end)", source, bytes.size(), at));
    }
    at = static_cast<size_t>(z.next_in - bytes.data());
  }
  return out;
}

std::vector<uint8_t> read_idx_file(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in, IOError, "{}: cannot open ({})", path, std::strerror(errno));
  // A gzip file is smaller than what it holds, except for a few bytes of
  // headers on tiny files.
  std::vector<uint8_t> bytes;
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(in.gcount());
    KILN_CHECK(bytes.size() + n <= max_bytes + 4096, IOError, "{}: larger than the {}-byte limit", path, max_bytes);
    bytes.insert(bytes.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
  }
  KILN_CHECK(in.eof(), IOError, "{}: read failed after {} bytes ({})", path, bytes.size(), std::strerror(errno));
  return decode_idx_bytes(bytes, path, max_bytes);
}

std::string FashionMNIST::default_dir() {
  const char* env = std::getenv("KILN_FASHION_MNIST_DIR");
  return env && *env ? env : "/usr/share/datasets/fashion-mnist";
}

FashionMNIST FashionMNIST::train(const std::string& dir) {
  return FashionMNIST(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz");
}

FashionMNIST FashionMNIST::test(const std::string& dir) {
  return FashionMNIST(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
}

FashionMNIST::FashionMNIST(const std::string& images_path, const std::string& labels_path) {
  auto images = read_idx_file(images_path, kImagesLimit);
  auto labels = read_idx_file(labels_path, kLabelsLimit);
  *this = from_idx(std::move(images), images_path, std::move(labels), labels_path);
}

FashionMNIST FashionMNIST::parse(std::span<const uint8_t> images_file, std::string_view images_name,
                                 std::span<const uint8_t> labels_file, std::string_view labels_name) {
  return from_idx(decode_idx_bytes(images_file, images_name, kImagesLimit), images_name,
                  decode_idx_bytes(labels_file, labels_name, kLabelsLimit), labels_name);
}

FashionMNIST FashionMNIST::from_idx(std::vector<uint8_t> images, std::string_view images_path,
                                    std::vector<uint8_t> labels, std::string_view labels_path) {
  Header hi = check_header(images, images_path, kImagesMagic);
  Header hl = check_header(labels, labels_path, kLabelsMagic);
  KILN_CHECK(hi.count == hl.count, IOError, "{} holds {} images but {} holds {} labels", images_path, hi.count,
             labels_path, hl.count);
  for (size_t i = 0; i < hl.count; ++i) {
    uint8_t v = labels[hl.data_offset + i];
    KILN_CHECK(v < kClasses, IOError, "{}: label {} at byte {} is outside 0..{}", labels_path, v, hl.data_offset + i,
               kClasses - 1);
  }
  images.erase(images.begin(), images.begin() + static_cast<std::ptrdiff_t>(hi.data_offset));
  labels.erase(labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(hl.data_offset));
  FashionMNIST d;
  d.images_ = std::make_shared<const std::vector<uint8_t>>(std::move(images));
  d.labels_ = std::make_shared<const std::vector<uint8_t>>(std::move(labels));
  d.count_ = hi.count;
  return d;
}

FashionMNIST FashionMNIST::subset(int64_t begin, int64_t end) const {
  KILN_CHECK(0 <= begin && begin <= end && end <= count_, IndexError,
             "FashionMNIST::subset({}, {}): range outside 0..{}", begin, end, count_);
  FashionMNIST s;
  s.images_ = images_;
  s.labels_ = labels_;
  s.offset_ = offset_ + begin;
  s.count_ = end - begin;
  return s;
}

Batch FashionMNIST::batch(std::span<const int64_t> indices, Device device) const {
  constexpr int64_t kPixels = kRows * kCols;
  auto n = static_cast<int64_t>(indices.size());
  std::vector<float> x(static_cast<size_t>(n * kPixels));
  std::vector<float> y(static_cast<size_t>(n));
  const uint8_t* img = images();
  const uint8_t* lab = labels();
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = indices[static_cast<size_t>(i)];
    KILN_CHECK(k >= 0 && k < count_, IndexError, "FashionMNIST: sample {} out of range 0..{}", k, count_ - 1);
    const uint8_t* src = img + k * kPixels;
    float* dst = x.data() + i * kPixels;
    for (int64_t p = 0; p < kPixels; ++p) dst[p] = static_cast<float>(src[p]) * (1.0f / 255.0f);
    y[static_cast<size_t>(i)] = static_cast<float>(lab[k]);
  }
  return {nd::array(x, Shape{n, 1, kRows, kCols}, device), nd::array(y, Shape{n}, device)};
}

ArrayDataset::ArrayDataset(std::vector<float> features, Shape sample_shape, std::vector<float> labels)
    : features_(std::move(features)), sample_shape_(sample_shape), labels_(std::move(labels)) {
  KILN_CHECK(static_cast<int64_t>(features_.size()) == sample_shape_.size() * size(), ShapeError,
             "ArrayDataset: {} feature values for {} samples of shape {}", features_.size(), size(), sample_shape_);
}

Batch ArrayDataset::batch(std::span<const int64_t> indices, Device device) const {
  int64_t per = sample_shape_.size();
  auto n = static_cast<int64_t>(indices.size());
  std::vector<float> x(static_cast<size_t>(n * per)), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = indices[static_cast<size_t>(i)];
    KILN_CHECK(k >= 0 && k < size(), IndexError, "ArrayDataset: sample {} out of range 0..{}", k, size() - 1);
    std::memcpy(x.data() + i * per, features_.data() + k * per, static_cast<size_t>(per) * sizeof(float));
    y[static_cast<size_t>(i)] = labels_[static_cast<size_t>(k)];
  }
  Shape s{n};
  for (int64_t d : sample_shape_) s.push_back(d);
  return {nd::array(x, s, device), nd::array(y, Shape{n}, device)};
}

}  // namespace kiln::data
