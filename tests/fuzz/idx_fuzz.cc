// Fashion-MNIST's IDX files, gzip-compressed or not
// (frontend/data/fashion_mnist.cc). The input holds both files: a
// little-endian u32 n, then the images file (n bytes), then the labels file
// (the rest); a shorter input is an images file alone, with no labels.
#include <cstring>

#include "frontend/data/fashion_mnist.h"
#include "tests/fuzz/fuzz_target.h"

namespace kiln {

KILN_FUZZ_TARGET(idx) {
  fuzz::Bytes images = data, labels;
  if (data.size() >= 4) {
    uint32_t n;
    std::memcpy(&n, data.data(), 4);
    data = data.subspan(4);
    images = data.first(std::min<size_t>(n, data.size()));
    labels = data.subspan(images.size());
  }
  data::FashionMNIST d = data::FashionMNIST::parse(images, "images", labels, "labels");
  if (d.size() > 0) {
    const int64_t last = d.size() - 1;
    (void)d.batch(std::span(&last, 1));
  }
}

}  // namespace kiln
