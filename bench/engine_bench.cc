// Engine benchmarks: per-op dispatch cost, and two CPU devices computing in
// parallel (d2l 12.2.3 and 12.3 in numbers).
#include <algorithm>
#include <cmath>

#include "bench/bench.h"
#include "frontend/nd.h"
#include "runtime/engine.h"

namespace kiln::bench {

namespace {

constexpr int kDispatchOps = 1000;

// 1,000 x `y = x + 1` on a 1x2 array, y reassigned each time (d2l 12.2.3).
// Async: pushed without waiting, one wait_all at the end; sync: y.wait_to_read()
// after every op. Wall time per op including the final wait, best of
// max(repeat, 5) runs after one warm-up run (the loop takes about a
// millisecond, so the best run is the one no other process interrupted).
double dispatch_us(const Options& options, bool sync) {
  NDArray x = nd::ones({1, 2});
  auto run = [&] {
    engine::wait_all();
    auto start = Clock::now();
    NDArray y;
    for (int i = 0; i < kDispatchOps; ++i) {
      y = x + 1;
      if (sync) y.wait_to_read();
    }
    engine::wait_all();
    return seconds_since(start);
  };
  run();  // warm-up: engine threads, pool size classes
  return best_of(std::max(options.repeat, 5), run) / kDispatchOps * 1e6;
}

std::vector<Figure> bench_dispatch(const Options& options) {
  return {{"dispatch_async_us", dispatch_us(options, false), "us"},
          {"dispatch_sync_us", dispatch_us(options, true), "us"}};
}

// Two chains of 20 dots 1000x1000 (about 2 GFLOP each), each device limited
// to one intra-op thread (the project's "two devices on two cores"): on
// cpu(0)+cpu(1) the chains run side by side; both on cpu(0) they queue on one
// lane. Speedup = one-device time / two-device time (2 is ideal on 2 idle cores).
// Best of `repeat` runs each.
std::vector<Figure> bench_two_device(const Options& options) {
  constexpr int kLength = 20;
  constexpr int64_t kN = 1000;
  const Device cpu0 = Device::cpu(0), cpu1 = Device::cpu(1);
  CpuThreadsGuard guard({cpu0, cpu1}, 1);
  two_chains_seconds(cpu0, cpu1, 2, kN);  // warm-up: workers and pools of both devices
  double one = best_of(options.repeat, [&] { return two_chains_seconds(cpu0, cpu0, kLength, kN); });
  double two = best_of(options.repeat, [&] { return two_chains_seconds(cpu0, cpu1, kLength, kN); });
  return {{"two_device_one_s", one, "s"}, {"two_device_two_s", two, "s"},
          {"two_device_speedup", one / two, "x"}};
}

}  // namespace

double two_chains_seconds(Device first, Device second, int length, int64_t n) {
  const double w_scale = 1.0 / std::sqrt(static_cast<double>(n));  // keeps x's scale steady
  NDArray x1 = nd::random::normal({n, n}, 0, 1, {.device = first});
  NDArray w1 = nd::random::normal({n, n}, 0, w_scale, {.device = first});
  NDArray x2 = nd::random::normal({n, n}, 0, 1, {.device = second});
  NDArray w2 = nd::random::normal({n, n}, 0, w_scale, {.device = second});
  engine::wait_all();
  auto start = Clock::now();
  // Interleaved pushes, as a frontend driving two devices would issue them.
  for (int i = 0; i < length; ++i) {
    x1 = nd::tanh(nd::dot(x1, w1));
    x2 = nd::tanh(nd::dot(x2, w2));
  }
  x1.wait_to_read();
  x2.wait_to_read();
  return seconds_since(start);
}

void register_engine_benchmarks() {
  add({"dispatch", {"dispatch_async_us", "dispatch_sync_us"}, &bench_dispatch});
  add({"two_device", {"two_device_one_s", "two_device_two_s", "two_device_speedup"}, &bench_two_device});
}

}  // namespace kiln::bench
