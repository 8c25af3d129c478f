// Creating arrays: constants, ranges, copies of host data, random samples.
//
//   auto a = nd::zeros({2, 3});                                  // float32 on cpu(0)
//   auto b = nd::full({4}, 7.0, {.dtype = DType::kInt32, .device = Device::cpu(1)});
//   auto c = nd::array(std::vector<float>{1, 2, 3, 4}, {2, 2});
//   nd::random::seed(42);
//   auto d = nd::random::normal({1000, 1000});                   // mean 0, std 1
//
// Every function returns at once; the fill is queued on the device's engine lane.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "frontend/ndarray.h"

namespace kiln::nd {

NDArray empty(const Shape& shape, ArrayOptions options = {});  // uninitialized
NDArray zeros(const Shape& shape, ArrayOptions options = {});
NDArray ones(const Shape& shape, ArrayOptions options = {});
NDArray full(const Shape& shape, double value, ArrayOptions options = {});
// [0, stop) and [start, stop) with `step`, as NumPy's arange.
NDArray arange(double stop, ArrayOptions options = {});
NDArray arange(double start, double stop, double step = 1, ArrayOptions options = {});
NDArray zeros_like(const NDArray& x);
NDArray ones_like(const NDArray& x);

// A copy of host values; dtype follows T (float → float32, int32_t → int32, ...).
// `shape` defaults to 1-D; its size must equal values.size() (ShapeError).
template <typename T>
NDArray array(std::span<const T> values, const Shape& shape, Device device = Device::cpu(0));
template <typename T>
NDArray array(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu(0)) {
  return array(std::span<const T>(values), shape, device);
}
template <typename T>
NDArray array(const std::vector<T>& values, Device device = Device::cpu(0)) {
  return array(std::span<const T>(values), Shape{static_cast<int64_t>(values.size())}, device);
}

namespace random {

// Seeds every device's generator (each device derives its own stream from
// `seed` and its id) and restarts the streams. Without a call, the seed is 0.
void seed(uint64_t seed);
// Seeds one device only.
void seed(uint64_t seed, Device device);

// The generators' whole state, for checkpoints: the global seed and, per
// device drawn from (or seeded), its stream's seed and how many values were
// drawn. Streams are counter-based, so restoring this state makes the next
// draws equal to those an uninterrupted program would make. Dropout keeps its
// own streams (nd::dropout_state in nd_nn.h).
struct StreamState {
  Device device;
  uint64_t seed = 0;
  int64_t offset = 0;
};
struct GeneratorState {
  uint64_t global_seed = 0;
  std::vector<StreamState> streams;  // sorted by device
};
GeneratorState get_state();
// Replaces every stream (devices not listed restart from global_seed).
void set_state(const GeneratorState& state);

NDArray uniform(const Shape& shape, double low = 0, double high = 1, ArrayOptions options = {});
NDArray normal(const Shape& shape, double loc = 0, double scale = 1, ArrayOptions options = {});

// For executors of traced graphs: random op attributes `attrs` (RandomAttrs)
// with the stream position of a new draw on `device`, as the nd::random
// functions draw it at a call.
OpAttrs attrs_for_call(const OpAttrs& attrs, Device device);

}  // namespace random
}  // namespace kiln::nd
