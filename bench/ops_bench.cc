// Operator benchmarks: fp32 matrix products (oneDNN) and d2l 12.2's
// normal-then-dot loop.
#include "bench/bench.h"
#include "frontend/nd.h"
#include "runtime/engine.h"

namespace kiln::bench {

namespace {

// nd::dot of two n x n float32 matrices with the default intra-op threads
// (all cores unless KILN_CPU_THREADS says otherwise). GFLOP/s = 2n^3 / t,
// t = push to result ready, best of `repeat` after one warm-up product.
double matmul_gflops(const Options& options, int64_t n) {
  NDArray a = nd::random::normal({n, n});
  NDArray b = nd::random::normal({n, n});
  nd::dot(a, b).wait_to_read();  // warm-up: oneDNN's first call, pool
  double seconds = best_of(options.repeat, [&] {
    engine::wait_all();
    auto start = Clock::now();
    nd::dot(a, b).wait_to_read();
    return seconds_since(start);
  });
  return 2.0 * static_cast<double>(n) * n * n / seconds * 1e-9;
}

std::vector<Figure> bench_matmul(const Options& options) {
  return {{"matmul_1000_gflops", matmul_gflops(options, 1000), "GFLOP/s"},
          {"matmul_2048_gflops", matmul_gflops(options, 2048), "GFLOP/s"}};
}

// d2l 12.2.1: 10 x (x = normal(1000x1000); y = dot(x, x)), then wait.
// Seconds, best of `repeat` after one warm-up run.
std::vector<Figure> bench_normal_dot(const Options& options) {
  auto run = [] {
    engine::wait_all();
    auto start = Clock::now();
    NDArray y;
    for (int i = 0; i < 10; ++i) {
      NDArray x = nd::random::normal({1000, 1000});
      y = nd::dot(x, x);
    }
    y.wait_to_read();
    engine::wait_all();
    return seconds_since(start);
  };
  run();
  return {{"normal_dot_10x_s", best_of(options.repeat, run), "s"}};
}

}  // namespace

void register_ops_benchmarks() {
  add({"matmul", {"matmul_1000_gflops", "matmul_2048_gflops"}, &bench_matmul});
  add({"normal_dot", {"normal_dot_10x_s"}, &bench_normal_dot});
}

}  // namespace kiln::bench
