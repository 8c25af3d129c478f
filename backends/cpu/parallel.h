// Intra-op parallelism for CPU kernels (OpenMP, the runtime oneDNN uses too).
//
//   parallel_for(ctx.run.num_threads, n, [&](int64_t begin, int64_t end) { ... });
//
// Splits [0, n) into at most `num_threads` contiguous ranges and runs them in
// parallel; runs inline when n is below `grain` elements or one thread is
// allowed. The split does not depend on timing, so results are deterministic
// for a fixed thread count. Kernels whose result must not depend on the thread
// count (reductions) split by a fixed block size instead.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace kiln::cpu {

inline constexpr int64_t kDefaultGrain = 1 << 15;  // elements: below this, threads cost more than they save

template <typename F>
void parallel_for(int num_threads, int64_t n, F&& fn, int64_t grain = kDefaultGrain) {
  int64_t chunks = std::min<int64_t>(num_threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t per = (n + nt - 1) / nt;
    int64_t b = std::min(n, t * per), e = std::min(n, b + per);
    if (b < e) fn(b, e);
  }
}

// Splits [0, n) into `workers` contiguous shares of ceil(n / workers) and
// runs fn(worker, begin, end) for each, every worker on its own thread of one
// parallel region: for kernels that keep a buffer or a partial result per
// worker. Shares past n are empty and still run, so per-worker state can be
// initialized there.
template <typename F>
void parallel_shares(int workers, int64_t n, F&& fn) {
  const int64_t share = (n + workers - 1) / std::max(workers, 1);
  parallel_for(
      workers, workers,
      [&](int64_t w0, int64_t w1) {
        for (int64_t w = w0; w < w1; ++w) fn(static_cast<int>(w), std::min(n, w * share), std::min(n, (w + 1) * share));
      },
      1);
}

}  // namespace kiln::cpu
