// Fashion-MNIST from its IDX files (gzip or plain), as Debian's
// `dataset-fashion-mnist` package installs them.
//
//   auto train = data::FashionMNIST::train();               // 60,000 images
//   auto test = data::FashionMNIST::test("/path/to/dir");   // 10,000 images
//   auto small = train.subset(0, 2000);                     // the first 2,000
//
// The files are validated on load (magic numbers, counts, dimensions, sizes);
// a missing, truncated or corrupt file throws IOError naming the file and what
// is wrong. Samples are 1x28x28 float32 images in [0, 1] and float32 labels
// 0..9 (as the d2l chapter converts them).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/data/dataset.h"

namespace kiln::data {

class FashionMNIST final : public Dataset {
 public:
  static constexpr int kRows = 28;
  static constexpr int kCols = 28;
  static constexpr int kClasses = 10;

  // KILN_FASHION_MNIST_DIR, else /usr/share/datasets/fashion-mnist.
  static std::string default_dir();
  static FashionMNIST train(const std::string& dir = default_dir());
  static FashionMNIST test(const std::string& dir = default_dir());

  FashionMNIST(const std::string& images_path, const std::string& labels_path);
  // The same from the two files' bytes in memory (gzip-compressed or not);
  // the names stand for the files in errors.
  static FashionMNIST parse(std::span<const uint8_t> images_file, std::string_view images_name,
                            std::span<const uint8_t> labels_file, std::string_view labels_name);

  int64_t size() const override { return count_; }
  Batch batch(std::span<const int64_t> indices, Device device = Device::cpu(0)) const override;
  // Samples [begin, end) sharing this dataset's memory.
  FashionMNIST subset(int64_t begin, int64_t end) const;
  // Raw bytes: image i is at images()[i * 784], label i at labels()[i].
  const uint8_t* images() const { return images_->data() + offset_ * kRows * kCols; }
  const uint8_t* labels() const { return labels_->data() + offset_; }

 private:
  FashionMNIST() = default;
  static FashionMNIST from_idx(std::vector<uint8_t> images, std::string_view images_path,
                               std::vector<uint8_t> labels, std::string_view labels_path);
  std::shared_ptr<const std::vector<uint8_t>> images_;
  std::shared_ptr<const std::vector<uint8_t>> labels_;
  int64_t offset_ = 0;
  int64_t count_ = 0;
};

// Reads a whole IDX file (gzip-compressed or not) with a size limit.
// Exposed for tests.
std::vector<uint8_t> read_idx_file(const std::string& path, size_t max_bytes);
// The same for a file's bytes in memory: gzip members (one or several,
// concatenated) are inflated, other bytes are taken as they are. IOError,
// naming `source` and the byte offset, for corrupt or truncated compressed
// data, for bytes after the last member, and as soon as the output would
// pass `max_bytes` (memory grows with the data inflated, never with a size
// the data declares).
std::vector<uint8_t> decode_idx_bytes(std::span<const uint8_t> bytes, std::string_view source, size_t max_bytes);

}  // namespace kiln::data
