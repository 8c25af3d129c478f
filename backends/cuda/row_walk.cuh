// A block's threads walking a contiguous range of a rows x cols grid laid
// out with strides, without a division per element (batch_norm.cu and
// reduce.cu's multi-block reductions use it).
//
//   // elements k in [begin, end) of the grid, k = row * cols + col, at
//   // base + row * row_stride + col * col_stride; thread t visits
//   // begin + t, begin + t + blockDim.x, ...
//   for_each_in_range(begin, end, cols, row_stride, 1, base, [&](int64_t off) { s += x[off]; });
//
// The start is decoded once per thread (one division); each step of
// blockDim.x = q * cols + r elements then moves q rows and r columns, with
// at most one carry since r < cols.
#pragma once

#include <cstdint>

namespace kiln::cuda {

template <typename F>
__device__ __forceinline__ void for_each_in_range(int64_t begin, int64_t end, int64_t cols, int64_t row_stride,
                                                  int64_t col_stride, int64_t base, F&& f) {
  int64_t k = begin + threadIdx.x;
  if (k >= end) return;
  const int64_t step = blockDim.x;
  const int64_t q = step / cols, r = step % cols;
  int64_t col = k % cols;
  int64_t off = base + (k / cols) * row_stride + col * col_stride;
  const int64_t jump = q * row_stride + r * col_stride;
  const int64_t wrap = row_stride - cols * col_stride;  // from column `cols` of a row to column 0 of the next
  for (; k < end; k += step) {
    f(off);
    col += r;
    off += jump;
    if (col >= cols) {
      col -= cols;
      off += wrap;
    }
  }
}

// Splits `n` items into `chunks` contiguous ranges of `len` items (the last
// may be shorter, none empty): chunks <= max_chunks, each range at least
// min_len items unless n < min_len (one chunk). n == 0: one empty chunk.
struct ChunkSplit {
  int64_t chunks = 1, len = 0;
};
inline ChunkSplit split_chunks(int64_t n, int64_t max_chunks, int64_t min_len) {
  ChunkSplit s;
  if (n <= 0) return s;
  int64_t by_len = (n + min_len - 1) / min_len;
  s.chunks = max_chunks < by_len ? max_chunks : by_len;
  if (s.chunks < 1) s.chunks = 1;
  s.len = (n + s.chunks - 1) / s.chunks;
  s.chunks = (n + s.len - 1) / s.len;
  return s;
}

}  // namespace kiln::cuda
