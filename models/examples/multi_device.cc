// d2l 12.3.1, "Parallel Computation on GPUs": ten matrix products on cpu(0),
// the same on cpu(1), and both, first with a wait between the devices and then
// without. Without the wait the engine runs the two devices' work at once,
// so both take about as long as one.
#include <algorithm>

#include "bench/bench.h"
#include "frontend/nd.h"
#include "models/examples/examples.h"
#include "runtime/engine.h"

namespace kiln::examples {

void run_multi_device(const Options& options) {
  const Device cpu0 = options.devices.at(0), cpu1 = options.devices.at(1);
  const int64_t n = options.quick ? 200 : 800;
  const int products = 10;
  bench::CpuThreadsGuard threads(options.devices, 1);
  NDArray x0 = nd::random::normal({n, n}, 0, 1, {.device = cpu0});
  NDArray x1 = nd::random::normal({n, n}, 0, 1, {.device = cpu1});
  auto run = [&](const NDArray& x) {
    std::vector<NDArray> ys;
    for (int i = 0; i < products; ++i) ys.push_back(nd::dot(x, x));
    return ys;
  };
  auto timed = [](auto&& body) {
    engine::wait_all();
    auto start = bench::Clock::now();
    body();
    engine::wait_all();
    return bench::seconds_since(start);
  };
  timed([&] {  // warm-up: kernels, pools, worker threads
    run(x0);
    run(x1);
  });

  // Best of three rounds (shared machines are noisy).
  double one0 = 1e9, one1 = 1e9, waiting = 1e9, both = 1e9;
  for (int round = 0; round < 3; ++round) {
    one0 = std::min(one0, timed([&] { run(x0); }));
    one1 = std::min(one1, timed([&] { run(x1); }));
    waiting = std::min(waiting, timed([&] {
                         run(x0);
                         engine::wait_all();
                         run(x1);
                       }));
    both = std::min(both, timed([&] {
                      run(x0);
                      run(x1);
                    }));
  }
  fmt::print(stderr, "# {} products of {}x{} matrices on {} and on {}, one intra-op thread per CPU device\n", products,
             n, n, cpu0, cpu1);
  report("multi_device_cpu0_s", one0, "s");
  report("multi_device_cpu1_s", one1, "s");
  report("multi_device_both_waiting_s", waiting, "s");
  report("multi_device_both_s", both, "s");
  report("multi_device_speedup", waiting / both, "x");
}

}  // namespace kiln::examples
