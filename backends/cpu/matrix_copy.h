// Strided element copies: the one data-movement primitive behind the matrix
// family's CPU kernels (transpose, slice, concat, stack, split, broadcast_to,
// reshape).
//
//   StridedLayout l;                      // out[i][j] = in[j][i] for an m x n input
//   l.push(n, m, 1);                      // out axis 0: n rows, dst stride m, src stride 1
//   l.push(m, 1, n);                      // out axis 1
//   strided_copy(ctx.run.num_threads, 4, out, in, l);
//
// Element (i0, i1, ...) goes from src + sum(i_k * src_stride_k) to dst +
// sum(i_k * dst_stride_k), strides in elements (negative or zero allowed on
// the source: reversed slices, broadcasting). Elements are moved as 1-, 2-, 4-
// or 8-byte units, so any dtype works. Destinations must not overlap each
// other or the source. Runs in parallel over `num_threads` for large copies;
// the result does not depend on the thread count.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "ir/error.h"
#include "ir/shape.h"

namespace kiln::cpu {

struct StridedLayout {
  static constexpr int kMaxAxes = Shape::kMaxNdim + 1;
  int ndim = 0;
  std::array<int64_t, kMaxAxes> dims{}, dst{}, src{};

  void push(int64_t dim, int64_t dst_stride, int64_t src_stride);
  int64_t size() const;
};

void strided_copy(int num_threads, size_t elem_size, void* dst, const void* src, StridedLayout layout);

// Calls fn(U{}) with the unsigned integer type U of `elem_size` bytes (1, 2, 4
// or 8): the unit in which kernels move elements of any dtype.
template <typename Fn>
void dispatch_unit(size_t elem_size, Fn&& fn) {
  switch (elem_size) {
    case 1:
      return fn(uint8_t{});
    case 2:
      return fn(uint16_t{});
    case 4:
      return fn(uint32_t{});
    case 8:
      return fn(uint64_t{});
  }
  KILN_ASSERT(elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8);
}

// Copies `bytes` contiguous bytes, in parallel when large.
void parallel_memcpy(int num_threads, void* dst, const void* src, size_t bytes);

}  // namespace kiln::cpu
