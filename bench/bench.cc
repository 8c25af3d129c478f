#include "bench/bench.h"

#include <algorithm>

#include "runtime/engine.h"

namespace kiln::bench {

namespace {
std::vector<Benchmark>& storage() {
  static std::vector<Benchmark> benchmarks;
  return benchmarks;
}
}  // namespace

void add(Benchmark benchmark) { storage().push_back(std::move(benchmark)); }

const std::vector<Benchmark>& registry() {
  static const bool registered = [] {
    register_dp_benchmarks();
    register_engine_benchmarks();
    register_ops_benchmarks();
    register_memory_benchmarks();
    register_train_benchmarks();
    register_hybridize_benchmarks();
    register_fusion_benchmarks();
    register_conv_benchmarks();
    register_cuda_benchmarks();
    register_checkpoint_benchmarks();
    register_gpt_benchmarks();
    register_attention_benchmarks();
    return true;
  }();
  (void)registered;
  return storage();
}

bool selected(const Benchmark& benchmark, std::span<const std::string> prefixes) {
  if (benchmark.internal) return std::find(prefixes.begin(), prefixes.end(), benchmark.name) != prefixes.end();
  if (prefixes.empty()) return true;
  for (const std::string& p : prefixes) {
    if (benchmark.name.starts_with(p)) return true;
    for (const std::string& f : benchmark.figures) {
      if (f.starts_with(p)) return true;
    }
  }
  return false;
}

CpuThreadsGuard::CpuThreadsGuard(std::span<const Device> devices, int threads) {
  auto& eng = engine::get();
  for (Device d : devices) {
    saved_.emplace_back(d, eng.cpu_threads(d));
    eng.set_cpu_threads(d, threads);
  }
}

CpuThreadsGuard::~CpuThreadsGuard() {
  auto& eng = engine::get();
  for (auto& [d, threads] : saved_) eng.set_cpu_threads(d, threads);
}

}  // namespace kiln::bench
