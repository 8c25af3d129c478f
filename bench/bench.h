// Kiln's benchmarks, run by `kiln bench [PREFIX...] [--repeat N]`.
//
//   std::vector<Figure> bench_thing(const Options& o) {
//     double s = best_of(o.repeat, [&] { ...; return seconds; });
//     return {{"thing_us", s * 1e6, "us"}};
//   }
//   void register_my_benchmarks() { add({"thing", {"thing_us"}, &bench_thing}); }
//
// A benchmark has a name, the names of the figures it reports and a function
// that measures them. `kiln bench PREFIX` runs the benchmarks whose name or any
// figure name starts with PREFIX, and prints each figure as one line
// `name value unit`. Registration is explicit: `registry()` calls each
// register_*_benchmarks() below once (no static registrars).
//
// Benchmarks run on the process-wide engine and may change per-device thread
// counts only through CpuThreadsGuard, which restores them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "frontend/ndarray.h"
#include "ir/device.h"

namespace kiln::bench {

struct Figure {
  std::string name;  // snake_case ending in the unit: "matmul_1000_gflops"
  double value = 0;
  std::string unit;  // "us", "s", "GFLOP/s", "MiB", "x"
};

struct Options {
  int repeat = 3;  // timed repeats; benchmarks report the best (the least disturbed)
};

using BenchFn = std::vector<Figure> (*)(const Options& options);

struct Benchmark {
  std::string name;
  std::vector<std::string> figures;  // what it reports, for selection and --list
  BenchFn run = nullptr;
  // A part another benchmark runs (in a child process): selected only by its
  // exact name, never by a prefix or by `kiln bench` with no prefix.
  bool internal = false;
};

void add(Benchmark benchmark);
// Every benchmark, in registration order (registers them on first use).
const std::vector<Benchmark>& registry();
// True when no prefixes are given, or one starts the name or a figure name.
bool selected(const Benchmark& benchmark, std::span<const std::string> prefixes);

// One call per file of benchmarks.
void register_dp_benchmarks();      // bench/dp_bench.cc
void register_engine_benchmarks();  // bench/engine_bench.cc
void register_ops_benchmarks();     // bench/ops_bench.cc
void register_memory_benchmarks();  // bench/memory_bench.cc
void register_train_benchmarks();   // bench/train_bench.cc
void register_hybridize_benchmarks();  // bench/hybridize_bench.cc
void register_fusion_benchmarks();     // bench/fusion_bench.cc
void register_conv_benchmarks();       // bench/conv_bench.cc
void register_cuda_benchmarks();       // bench/cuda_bench.cc (skip without a GPU)
void register_checkpoint_benchmarks();  // bench/checkpoint_bench.cc
void register_gpt_benchmarks();         // bench/gpt_bench.cc
void register_attention_benchmarks();   // bench/attention_bench.cc

// ---- helpers

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs `fn` (which returns the seconds it measured) `repeat` times, at least
// once, and returns the smallest.
template <typename F>
double best_of(int repeat, F&& fn) {
  double best = fn();
  for (int i = 1; i < repeat; ++i) {
    double s = fn();
    if (s < best) best = s;
  }
  return best;
}

// Sets the intra-op threads of CPU devices for a scope and restores them.
class CpuThreadsGuard {
 public:
  CpuThreadsGuard(std::span<const Device> devices, int threads);
  CpuThreadsGuard(std::initializer_list<Device> devices, int threads)
      : CpuThreadsGuard(std::span<const Device>(devices.begin(), devices.size()), threads) {}
  ~CpuThreadsGuard();
  CpuThreadsGuard(const CpuThreadsGuard&) = delete;
  CpuThreadsGuard& operator=(const CpuThreadsGuard&) = delete;

 private:
  std::vector<std::pair<Device, int>> saved_;
};

// ---- workloads shared with `kiln demo`

// Two independent chains of `length` steps x <- tanh(dot(x, w)) on n x n
// float32 matrices, the first on `first`, the second on `second` (which may
// be the same device). Inputs are created and waited for before the clock
// starts; returns the seconds until both chains have finished.
double two_chains_seconds(Device first, Device second, int length, int64_t n);

// Microseconds per call of d2l 12.1's MLP (models::mlp_chapter) on one 1x512
// sample on `device`, imperative or hybridized: 1,000 calls per round, best
// of options.repeat rounds after a warm-up round (deferred init, trace,
// plans); `after_warmup` runs between the warm-up and the timed rounds
// (hybridize_bench.cc).
double mlp_us_per_call(const Options& options, bool hybridize, Device device,
                       const std::function<void()>& after_warmup = {});

}  // namespace kiln::bench
