// `kiln demo`: asynchronous execution and the profiler in miniature (the
// experiments of d2l chapters 12.2 and 12.3), in a few seconds:
//   1. pushing work returns at once, the results come later;
//   2. reading a value waits for it;
//   3. per-op cost with and without a wait after each op;
//   4. two CPU devices (one core each) running two chains side by side;
//   5. a Chrome trace of step 4 written with profiler::dump.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "bench/bench.h"
#include "frontend/nd.h"
#include "runtime/engine.h"
#include "runtime/profiler.h"

namespace kiln::cli {

namespace {

using bench::Clock;
using bench::seconds_since;

void show_async() {
  fmt::print("1. Operations return at once; the engine runs them behind the frontend.\n");
  fmt::print("   10 x (x = normal(1000x1000); y = dot(x, x)):\n");
  engine::wait_all();
  auto start = Clock::now();
  NDArray y;
  for (int i = 0; i < 10; ++i) {
    NDArray x = nd::random::normal({1000, 1000});
    y = nd::dot(x, x);
  }
  double pushed = seconds_since(start);
  engine::wait_all();
  double done = seconds_since(start);
  fmt::print("     the loop returned after   {:8.2f} ms\n", pushed * 1e3);
  fmt::print("     results ready (wait_all)  {:8.2f} ms\n", done * 1e3);
  fmt::print("   (the loop itself waits only when more than {} MiB of outputs are pending:\n"
             "    the engine's back-pressure, KILN_MAX_PENDING_MB)\n\n",
             engine::get().max_pending_bytes() >> 20);
}

void show_blocking() {
  fmt::print("2. Reading a value waits for it (wait_to_read, item, to_vector, printing):\n");
  NDArray y = nd::ones({2, 3}) * 2 + 1;
  fmt::print("   y = ones(2x3) * 2 + 1; sum(y).item() = {}\n", nd::sum(y).item<float>());
  std::cout << y << "\n\n";
}

double per_op_us(bool sync, int ops) {
  NDArray x = nd::ones({1, 2});
  NDArray y;
  engine::wait_all();
  auto start = Clock::now();
  for (int i = 0; i < ops; ++i) {
    y = x + 1;
    if (sync) y.wait_to_read();
  }
  engine::wait_all();
  return seconds_since(start) / ops * 1e6;
}

void show_overhead() {
  constexpr int kOps = 10000;
  fmt::print("3. Frontend overhead: {} x (y = x + 1) on a 1x2 array:\n", kOps);
  per_op_us(false, 1000);  // warm-up
  double sync = per_op_us(true, kOps);
  double async = per_op_us(false, kOps);
  fmt::print("     y.wait_to_read() after each op  {:7.3f} us/op\n", sync);
  fmt::print("     no wait until the end           {:7.3f} us/op  ({:.1f}x faster)\n\n", async, sync / async);
}

void show_two_devices(const std::string& trace_path) {
  constexpr int kLength = 10;
  constexpr int64_t kN = 1000;
  const Device cpu0 = Device::cpu(0), cpu1 = Device::cpu(1);
  fmt::print("4. Two devices: two chains of {} x tanh(dot(x, w)), {}x{}, one core per device:\n", kLength, kN,
             kN);
  bench::CpuThreadsGuard guard({cpu0, cpu1}, 1);
  bench::two_chains_seconds(cpu0, cpu1, 1, kN);  // warm-up
  double one = bench::two_chains_seconds(cpu0, cpu0, kLength, kN);

  // KILN_PROFILE may already be recording the whole run; then leave it be.
  bool was_on = profiler::enabled();
  if (!was_on) {
    profiler::clear();
    profiler::start();
  }
  double two = bench::two_chains_seconds(cpu0, cpu1, kLength, kN);
  engine::wait_all();
  if (!was_on) profiler::stop();
  fmt::print("     both chains on cpu(0)             {:6.3f} s\n", one);
  fmt::print("     one on cpu(0), the other on cpu(1) {:5.3f} s  ({:.2f}x)\n\n", two, one / two);

  fmt::print("5. Profiler: the two-device run of step 4 as a Chrome trace.\n");
  profiler::dump(trace_path);
  fmt::print("     {} events written to {}\n", profiler::events().size(),
             std::filesystem::absolute(trace_path).string());
  fmt::print("     open it at https://ui.perfetto.dev (\"Open trace file\") or in chrome://tracing (\"Load\"):\n");
  fmt::print("     one process per device, one row per engine lane; the two chains overlap in time.\n");
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto trace = std::make_shared<std::string>("kiln-demo-trace.json");
  CLI::App* cmd = app.add_subcommand("demo", "Show asynchronous execution, two devices and the profiler");
  cmd->add_option("--trace", *trace, "Where to write the Chrome trace")->capture_default_str();
  cmd->callback([trace] {
    auto start = Clock::now();
    fmt::print("Kiln demo: asynchronous execution and the profiler (d2l 12.2-12.3 in miniature)\n\n");
    show_async();
    show_blocking();
    show_overhead();
    show_two_devices(*trace);
    fmt::print("\ndone in {:.1f} s\n", seconds_since(start));
  });
}

}  // namespace kiln::cli
