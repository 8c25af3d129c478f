// Kiln's counter-based random stream: the value at position i of stream
// `seed` is a hash of (seed, i), so samples need no generator state and do
// not depend on thread count or scheduling. Random ops (_random_uniform,
// _random_normal) and Dropout's mask read it on every backend: the functions
// are constexpr, which CUDA device code may call (nvcc's
// --expt-relaxed-constexpr, set for the CUDA backend), so the CPU and GPU
// draw the same stream from one definition.
#pragma once

#include <cstdint>

namespace kiln::rng {

// A 64-bit finalizer (splitmix64's): every input bit affects every output bit.
constexpr uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// 64 random bits at `position` of stream `seed`.
constexpr uint64_t random_bits(uint64_t seed, uint64_t position) {
  return mix64(seed ^ mix64(position + 0x9e3779b97f4a7c15ull));
}

// Uniform in [0, 1) with 53 random bits.
constexpr double unit_uniform(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// Uniform in [0, 1) at `position` of stream `seed`.
constexpr double uniform_at(uint64_t seed, uint64_t position) { return unit_uniform(random_bits(seed, position)); }

}  // namespace kiln::rng
