// Memory when the frontend runs ahead of the engine (d2l 12.2's warning that
// an unbounded frontend can queue up memory faster than it is freed).
#include "bench/bench.h"
#include "frontend/nd.h"
#include "runtime/engine.h"
#include "runtime/storage.h"

namespace kiln::bench {

namespace {

constexpr int kIterations = 200;
constexpr int64_t kN = 1024;
constexpr double kMiB = 1024.0 * 1024.0;

struct LoopResult {
  double peak_mib = 0;
  double seconds = 0;
};

// One iteration makes three 4 MiB temporaries (x, y, z) that die at its end;
// w (4 MiB) lives throughout. With `barrier`, each iteration waits for its
// result, so the frontend never gets ahead and the peak is about w plus one
// iteration's temporaries. Without, a dot takes milliseconds and a push
// microseconds, so the frontend runs ahead until the engine's back-pressure
// (pending output bytes above max_pending_bytes) stops it: the peak grows by
// at most about that bound. The ratio of the two peaks therefore depends on
// the workload's working set compared with the bound; the excess over the
// barrier run is what the bound controls.
LoopResult run_loop(bool barrier) {
  storage::Pool& pool = storage::pool(Device::cpu(0));
  NDArray w = nd::random::normal({kN, kN}, 0, 0.03);
  NDArray acc = nd::zeros({});
  engine::wait_all();
  pool.reset_peak();
  auto start = Clock::now();
  for (int i = 0; i < kIterations; ++i) {
    NDArray x = nd::random::normal({kN, kN});
    NDArray y = nd::dot(x, w);
    NDArray z = nd::relu(y);
    acc += nd::sum(z);
    if (barrier) acc.wait_to_read();
  }
  acc.wait_to_read();
  engine::wait_all();
  LoopResult r;
  r.seconds = seconds_since(start);
  r.peak_mib = static_cast<double>(pool.stats().peak_in_use) / kMiB;
  return r;
}

// Peaks are measured once per mode (they do not depend on timing noise the
// way times do); `repeat` is not used.
std::vector<Figure> bench_runahead(const Options&) {
  LoopResult barrier = run_loop(true);
  LoopResult ahead = run_loop(false);
  double bound = static_cast<double>(engine::get().max_pending_bytes()) / kMiB;
  return {{"runahead_peak_mb", ahead.peak_mib, "MiB"},
          {"barrier_peak_mb", barrier.peak_mib, "MiB"},
          {"runahead_ratio", ahead.peak_mib / barrier.peak_mib, "x"},
          {"runahead_excess_mb", ahead.peak_mib - barrier.peak_mib, "MiB"},
          {"max_pending_mb", bound, "MiB"},
          {"runahead_loop_s", ahead.seconds, "s"},
          {"barrier_loop_s", barrier.seconds, "s"}};
}

}  // namespace

void register_memory_benchmarks() {
  add({"runahead",
       {"runahead_peak_mb", "barrier_peak_mb", "runahead_ratio", "runahead_excess_mb", "max_pending_mb",
        "runahead_loop_s", "barrier_loop_s"},
       &bench_runahead});
}

}  // namespace kiln::bench
