// Datasets: indexed collections of (data, label) samples that can be read a
// batch at a time.
//
//   auto train = data::FashionMNIST::train();        // reads /usr/share/datasets/fashion-mnist
//   data::Batch b = train.batch({0, 1, 2});           // data [3,1,28,28] float32 in [0,1], label [3]
//
// `batch` builds host arrays and returns NDArrays on `device`; it is called
// from the DataLoader's prefetch thread, so implementations must be safe to
// call concurrently with themselves (they only read immutable state).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "frontend/ndarray.h"

namespace kiln::data {

struct Batch {
  NDArray data;
  NDArray label;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch batch(std::span<const int64_t> indices, Device device = Device::cpu(0)) const = 0;
};

// Samples held in host memory: `features` is [N, ...] float32, `labels` [N].
class ArrayDataset final : public Dataset {
 public:
  ArrayDataset(std::vector<float> features, Shape sample_shape, std::vector<float> labels);
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Batch batch(std::span<const int64_t> indices, Device device = Device::cpu(0)) const override;

 private:
  std::vector<float> features_;
  Shape sample_shape_;
  std::vector<float> labels_;
};

}  // namespace kiln::data
