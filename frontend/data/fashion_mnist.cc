#include "frontend/data/fashion_mnist.h"

#include <zlib.h>

#include <cstdlib>
#include <cstring>

#include "frontend/nd_init.h"
#include "ir/error.h"

namespace kiln::data {
namespace {

constexpr uint32_t kImagesMagic = 2051;  // IDX: unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // IDX: unsigned byte, 1 dimension
constexpr int64_t kMaxSamples = 10'000'000;

uint32_t read_be32(const std::vector<uint8_t>& b, size_t offset) {
  return static_cast<uint32_t>(b[offset]) << 24 | static_cast<uint32_t>(b[offset + 1]) << 16 |
         static_cast<uint32_t>(b[offset + 2]) << 8 | b[offset + 3];
}

struct Header {
  uint32_t count = 0;
  size_t data_offset = 0;
};

Header check_header(const std::vector<uint8_t>& b, const std::string& path, uint32_t magic) {
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

std::vector<uint8_t> read_idx_file(const std::string& path, size_t max_bytes) {
  gzFile f = gzopen(path.c_str(), "rb");  // also reads uncompressed files
  KILN_CHECK(f != nullptr, IOError, "{}: cannot open ({})", path, std::strerror(errno));
  std::vector<uint8_t> out;
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    int n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      throw IOError(fmt::format("{}: corrupt compressed data after {} bytes ({})", path, out.size(), msg));
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      gzclose(f);
      throw IOError(fmt::format("{}: larger than the {}-byte limit", path, max_bytes));
    }
    out.insert(out.end(), buf.begin(), buf.begin() + n);
  }
  gzclose(f);
  return out;
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
  constexpr size_t kLimit = 16 + static_cast<size_t>(kMaxSamples) * kRows * kCols;
  auto images = read_idx_file(images_path, kLimit);
  auto labels = read_idx_file(labels_path, 8 + static_cast<size_t>(kMaxSamples));
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
  images_ = std::make_shared<const std::vector<uint8_t>>(std::move(images));
  labels_ = std::make_shared<const std::vector<uint8_t>>(std::move(labels));
  count_ = hi.count;
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
