// d2l 12.3.2, "Parallel Computation and Communication": compute ten results on
// cpu(0), then copy them to cpu(1), against issuing each copy right after
// its result. Copies run on the destination's copy lane, so the copy of
// result i overlaps the computation of result i + 1.
//
// The chapter computes matrix products; on CPUs a product of matrices that
// take a noticeable time to copy takes far longer to compute, so the copy
// would hide in the noise. The work here is elementwise (tanh of a scaled
// array), whose time is of the order of a copy of its result.
#include <algorithm>

#include "bench/bench.h"
#include "frontend/nd.h"
#include "models/examples/examples.h"
#include "runtime/engine.h"

namespace kiln::examples {

void run_compute_copy(const Options& options) {
  const Device cpu0 = options.devices.at(0), cpu1 = options.devices.at(1);
  const int64_t n = options.quick ? (1 << 18) : (1 << 22);  // floats per result: 1 Mi or 16 MiB
  const int results = 10;
  bench::CpuThreadsGuard threads(options.devices, 1);
  NDArray x = nd::random::normal({n}, 0, 1, {.device = cpu0});
  auto compute = [&] {
    std::vector<NDArray> ys;
    for (int i = 0; i < results; ++i) ys.push_back(nd::tanh(x * (1.0 + i)));
    return ys;
  };
  auto copy = [&](const std::vector<NDArray>& ys) {
    std::vector<NDArray> out;
    for (const NDArray& y : ys) out.push_back(y.copy_to(cpu1));
    return out;
  };
  auto timed = [](auto&& body) {
    engine::wait_all();
    auto start = bench::Clock::now();
    body();
    engine::wait_all();
    return bench::seconds_since(start);
  };
  copy(compute());  // warm-up: the pools hold blocks for the results and their copies
  engine::wait_all();

  // Best of three rounds; every round frees its arrays, so each measurement
  // draws the same pooled blocks.
  double compute_s = 1e9, copy_s = 1e9, overlapped_s = 1e9;
  for (int round = 0; round < 3; ++round) {
    std::vector<NDArray> ys, copies;
    compute_s = std::min(compute_s, timed([&] { ys = compute(); }));
    copy_s = std::min(copy_s, timed([&] { copies = copy(ys); }));
    ys.clear();
    copies.clear();
    overlapped_s = std::min(overlapped_s, timed([&] { copies = copy(compute()); }));
  }
  fmt::print(stderr, "# {} results of {} floats computed on {} and copied to {}\n", results, n, cpu0, cpu1);
  report("compute_copy_compute_s", compute_s, "s");
  report("compute_copy_copy_s", copy_s, "s");
  report("compute_copy_sequential_s", compute_s + copy_s, "s");
  report("compute_copy_overlapped_s", overlapped_s, "s");
  // Share of the copy time hidden behind compute (1: all of it).
  report("compute_copy_hidden_fraction", (compute_s + copy_s - overlapped_s) / copy_s, "x");
}

}  // namespace kiln::examples
