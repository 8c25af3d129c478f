#include "frontend/nd_init.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "frontend/invoke.h"
#include "frontend/nd_nn.h"
#include "ir/ops/init.h"

namespace kiln::nd {

NDArray empty(const Shape& shape, ArrayOptions options) { return NDArray::empty(shape, options); }

NDArray zeros(const Shape& shape, ArrayOptions options) {
  return invoke1(OpId::kZeros, {}, OpAttrs::make(InitAttrs{shape, options.dtype}), {.device = options.device});
}

NDArray ones(const Shape& shape, ArrayOptions options) {
  return invoke1(OpId::kOnes, {}, OpAttrs::make(InitAttrs{shape, options.dtype}), {.device = options.device});
}

NDArray full(const Shape& shape, double value, ArrayOptions options) {
  return invoke1(OpId::kFull, {}, OpAttrs::make(FullAttrs{shape, options.dtype, value}), {.device = options.device});
}

NDArray arange(double stop, ArrayOptions options) { return arange(0, stop, 1, options); }

NDArray arange(double start, double stop, double step, ArrayOptions options) {
  return invoke1(OpId::kArange, {}, OpAttrs::make(ArangeAttrs{start, stop, step, 1, options.dtype}),
                 {.device = options.device});
}

NDArray zeros_like(const NDArray& x) { return zeros(x.shape(), {x.dtype(), x.device()}); }
NDArray ones_like(const NDArray& x) { return ones(x.shape(), {x.dtype(), x.device()}); }

namespace {

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  else if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::kInt64;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::kUint8;
  else if constexpr (std::is_same_v<T, int8_t>) return DType::kInt8;
  else static_assert(sizeof(T) == 0, "unsupported element type");
}

}  // namespace

template <typename T>
NDArray array(std::span<const T> values, const Shape& shape, Device device) {
  KILN_CHECK(static_cast<int64_t>(values.size()) == shape.size(), ShapeError,
             "nd::array: {} values do not fill shape {} ({} elements)", values.size(), shape, shape.size());
  // Elsewhere than on a CPU: built on cpu(0), then copied on the device's copy lane.
  if (!device.is_cpu()) return array(values, shape, Device::cpu(0)).copy_to(device);
  NDArray out = NDArray::empty(shape, {dtype_of<T>(), device});
  if (values.empty()) return out;  // no bytes to write (and memcpy may not take null pointers)
  std::vector<T> copy(values.begin(), values.end());
  engine::get().push(
      [out, copy = std::move(copy)](engine::RunContext) { std::memcpy(out.data(), copy.data(), out.nbytes()); }, {},
      {out.var()}, {.device = device, .lane = engine::Lane::kCopy, .name = "array", .bytes = static_cast<int64_t>(out.nbytes())});
  return out;
}

template NDArray array<float>(std::span<const float>, const Shape&, Device);
template NDArray array<double>(std::span<const double>, const Shape&, Device);
template NDArray array<int32_t>(std::span<const int32_t>, const Shape&, Device);
template NDArray array<int64_t>(std::span<const int64_t>, const Shape&, Device);
template NDArray array<uint8_t>(std::span<const uint8_t>, const Shape&, Device);
template NDArray array<int8_t>(std::span<const int8_t>, const Shape&, Device);

namespace random {
namespace {

// Per-device stream state: the seed and how many values have been drawn.
// Advanced at the call (not when the kernel runs), so a program's random
// values do not depend on scheduling.
struct Streams {
  std::mutex mu;
  uint64_t global_seed = 0;
  std::unordered_map<Device, std::pair<uint64_t, int64_t>> state;  // seed, offset

  std::pair<int64_t, int64_t> next(Device d, int64_t n) {
    std::lock_guard lock(mu);
    auto [it, inserted] = state.try_emplace(d, derive(global_seed, d), 0);
    auto& [seed, offset] = it->second;
    int64_t start = offset;
    offset += (n + 1) / 2 * 2;  // normal samples come in pairs
    return {static_cast<int64_t>(seed), start};
  }

  static uint64_t derive(uint64_t seed, Device d) {
    return seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(d.kind) * 1000003u + static_cast<uint64_t>(d.id);
  }
};

Streams& streams() {
  static Streams s;
  return s;
}

NDArray sample(OpId op, const Shape& shape, double a, double b, ArrayOptions options) {
  KILN_CHECK(is_floating(options.dtype), TypeError, "random: samples must be floating point, got {}",
             options.dtype);
  auto [seed, offset] = streams().next(options.device, shape.size());
  return invoke1(op, {}, OpAttrs::make(RandomAttrs{a, b, shape, options.dtype, seed, offset}),
                 {.device = options.device});
}

}  // namespace

void seed(uint64_t s) {
  auto& st = streams();
  std::lock_guard lock(st.mu);
  st.global_seed = s;
  st.state.clear();
  nd::dropout_seed(s);  // Dropout masks follow the same seed
}

OpAttrs attrs_for_call(const OpAttrs& attrs, Device device) {
  RandomAttrs a = attrs.as<RandomAttrs>();
  std::tie(a.seed, a.offset) = streams().next(device, a.shape.size());
  return OpAttrs::make(a);
}

void seed(uint64_t s, Device device) {
  auto& st = streams();
  std::lock_guard lock(st.mu);
  st.state[device] = {Streams::derive(s, device), 0};
}

GeneratorState get_state() {
  auto& st = streams();
  std::lock_guard lock(st.mu);
  GeneratorState out{.global_seed = st.global_seed, .streams = {}};
  for (const auto& [d, s] : st.state) out.streams.push_back({d, s.first, s.second});
  std::sort(out.streams.begin(), out.streams.end(), [](const StreamState& a, const StreamState& b) {
    return std::pair(a.device.kind, a.device.id) < std::pair(b.device.kind, b.device.id);
  });
  return out;
}

void set_state(const GeneratorState& state) {
  auto& st = streams();
  std::lock_guard lock(st.mu);
  st.global_seed = state.global_seed;
  st.state.clear();
  for (const StreamState& s : state.streams) st.state[s.device] = {s.seed, s.offset};
}

NDArray uniform(const Shape& shape, double low, double high, ArrayOptions options) {
  KILN_CHECK(low <= high, ValueError, "random::uniform: low ({}) must not exceed high ({})", low, high);
  return sample(OpId::kRandomUniform, shape, low, high, options);
}

NDArray normal(const Shape& shape, double loc, double scale, ArrayOptions options) {
  KILN_CHECK(scale >= 0, ValueError, "random::normal: scale must be >= 0, got {}", scale);
  return sample(OpId::kRandomNormal, shape, loc, scale, options);
}

}  // namespace random
}  // namespace kiln::nd
