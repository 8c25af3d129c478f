// Scratch owned by the calling thread, grown as needed and kept (OpenMP's
// threads persist, so a kernel's per-thread buffers are allocated once):
//
//   float* row = cpu::thread_buffer<float>(n);          // n floats
//   uint16_t* a = cpu::thread_buffer<uint16_t, 1>(m);   // Tag: a second buffer of that type in use at once
//
// The pointer stays valid until the same thread asks for the same (T, Tag)
// again; contents are not kept across a growth.
#pragma once

#include <cstddef>
#include <vector>

namespace kiln::cpu {

template <typename T, int Tag = 0>
T* thread_buffer(size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace kiln::cpu
