#include "frontend/split.h"

namespace kiln {

std::vector<int64_t> split_sizes(int64_t rows, int num_devices, bool even_split) {
  KILN_CHECK(num_devices >= 1, ValueError, "split_and_load: no devices given");
  KILN_CHECK(rows >= 1, ValueError, "split_and_load: the batch has {} rows along axis 0; need at least 1", rows);
  KILN_CHECK(!even_split || rows % num_devices == 0, ValueError,
             "split_and_load: {} rows do not split evenly over {} devices; pass even_split = false for balanced "
             "shards of unequal size",
             rows, num_devices);
  int64_t n = num_devices, base = rows / n, extra = rows % n;
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < n; ++i) {
    int64_t s = base + (i < extra ? 1 : 0);
    if (s > 0) sizes.push_back(s);
  }
  return sizes;
}

std::vector<NDArray> split_and_load(const NDArray& batch, const std::vector<Device>& devices, bool even_split) {
  KILN_CHECK(!batch.is_none(), ValueError, "split_and_load: the batch is empty (none)");
  KILN_CHECK(!batch.is_symbolic(), NotSupported,
             "split_and_load: the batch is symbolic; split outside hybridized code");
  KILN_CHECK(batch.ndim() >= 1, ShapeError, "split_and_load: the batch is a scalar; need at least one axis");
  std::vector<int64_t> sizes = split_sizes(batch.shape()[0], static_cast<int>(devices.size()), even_split);
  int64_t row_bytes = batch.shape()[0] == 0 ? 0 : static_cast<int64_t>(batch.nbytes()) / batch.shape()[0];
  std::vector<NDArray> out;
  int64_t begin = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape shape = batch.shape();
    shape[0] = sizes[i];
    // A view of rows [begin, begin + sizes[i]): shares the chunk and its engine variable.
    NDArray view(batch.chunk(), shape, batch.dtype(), batch.byte_offset() + begin * row_bytes);
    out.push_back(devices[i] == batch.device() ? view : view.copy_to(devices[i]));
    begin += sizes[i];
  }
  return out;
}

std::pair<std::vector<NDArray>, std::vector<NDArray>> split_batch(const NDArray& X, const NDArray& y,
                                                                  const std::vector<Device>& devices, bool even_split) {
  KILN_CHECK(!X.is_none() && !y.is_none() && X.ndim() >= 1 && y.ndim() >= 1 && X.shape()[0] == y.shape()[0], ShapeError,
             "split_batch: features {} and labels {} must have the same number of rows (axis 0)",
             X.is_none() ? Shape{} : X.shape(), y.is_none() ? Shape{} : y.shape());
  return {split_and_load(X, devices, even_split), split_and_load(y, devices, even_split)};
}

}  // namespace kiln
