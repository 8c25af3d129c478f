// A parallel loop whose caller never waits for a helper thread to start:
// for short, memory-bound kernels called thousands of times a second (the
// dense layers of a hybridized MLP on one sample), where an OpenMP region's
// fork and join barrier cost as much as the work, and where a helper that the
// scheduler has parked (another process on the core, or the frontend thread
// pushing the next calls) would hold an OpenMP join for a time slice.
//
//   cpu::parallel_claim(ctx.run.num_threads, blocks, [&](int64_t b0, int64_t b1) { ... });
//
// [0, n) is cut into `num_threads` contiguous parts, one per participant: the
// calling thread and num_threads - 1 helper threads (process-wide, started
// on first use, spinning briefly between calls and then sleeping). Each
// participant claims units of its own part front to back, then claims units
// of the other parts; the call returns when every unit has run. So when all
// participants run, each does its own part, the same part every call (its
// data stays in its core's cache); when a helper is late, the caller does its
// units; the caller only ever waits for units already being run.
//
// Which thread runs a unit, and so the ranges `fn` sees, depend on timing:
// `fn(b0, b1)` must give the same result for a range however [0, n) was cut
// (the GEMV of backends/cpu/gemv.h: every output's sum is independent of the
// range). `fn` must not throw.
//
// One loop runs at a time: a call made while another thread's call is
// running (two CPU devices' workers) runs all of [0, n) in the calling
// thread, as does a call with num_threads <= 1 or n <= 1. Not reentrant from
// inside `fn`.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kiln::cpu {

namespace detail {
using ClaimFn = void (*)(const void* ctx, int64_t begin, int64_t end);
void parallel_claim(int num_threads, int64_t n, ClaimFn fn, const void* ctx);
}  // namespace detail

template <typename F>
void parallel_claim(int num_threads, int64_t n, const F& fn) {
  if (n <= 0) return;
  if (num_threads <= 1 || n == 1) return fn(int64_t{0}, n);
  detail::parallel_claim(
      num_threads, n,
      [](const void* ctx, int64_t begin, int64_t end) { (*static_cast<const F*>(ctx))(begin, end); }, &fn);
}

}  // namespace kiln::cpu
