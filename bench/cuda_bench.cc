// GPU benchmarks (cuda(0)); each skips with one line on stderr, reporting no
// figure, when the process sees no GPU. Run by scripts/gpu-check.sh.
//
//   kiln bench cuda_      # every figure below
//
// Times are wall-clock from push to the result being ready on the host side
// of the engine (every CUDA op synchronizes its stream before completing), best of
// `repeat` after a warm-up. Bandwidths count bytes read plus bytes written.
#include <cstdio>

#include "bench/bench.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/ops/fused.h"
#include "models/zoo.h"
#include "runtime/device_backend.h"
#include "runtime/engine.h"
#include "runtime/graph_capture.h"
#if defined(KILN_HAVE_CUDA)
#include "backends/cuda/fused_nvrtc.h"
#include "backends/cuda/testing.h"
#endif

namespace kiln::bench {

namespace {

constexpr Device kGpu = Device::cuda(0);

bool have_gpu(const char* name) {
  if (device_count(DeviceKind::kCUDA) > 0) return true;
  std::fprintf(stderr, "%s: no CUDA device; skipping\n", name);
  return false;
}

template <typename F>
double timed(const Options& options, F&& f) {
  f();  // warm-up: allocations, cuBLAS/cuDNN handles, algorithm choice
  return best_of(options.repeat, [&] {
    engine::wait_all();
    auto start = Clock::now();
    f();
    return seconds_since(start);
  });
}

// Host <-> GPU copies of 64 MiB through the pinned staging buffers, and a
// GPU-to-GPU copy of the same size (read + write).
std::vector<Figure> bench_copy(const Options& options) {
  if (!have_gpu("cuda_copy")) return {};
  const int64_t n = int64_t{16} << 20;  // floats
  const double bytes = static_cast<double>(n) * 4;
  NDArray host = nd::ones({n});
  NDArray gpu = host.copy_to(kGpu);
  double h2d = timed(options, [&] { host.copy_to(kGpu).wait_to_read(); });
  double d2h = timed(options, [&] { gpu.copy_to(Device::cpu(0)).wait_to_read(); });
  double d2d = timed(options, [&] { gpu.copy_to(kGpu).wait_to_read(); });
  std::vector<Figure> figures = {{"cuda_h2d_gbps", bytes / h2d * 1e-9, "GB/s"},
                                 {"cuda_d2h_gbps", bytes / d2h * 1e-9, "GB/s"},
                                 {"cuda_d2d_gbps", 2 * bytes / d2d * 1e-9, "GB/s"}};
#if defined(KILN_HAVE_CUDA)
  // The ceiling: one DMA from/to page-locked memory, no staging.
  const auto size = static_cast<size_t>(bytes);
  figures.push_back({"cuda_h2d_pinned_ceiling_gbps", cuda::testing::pinned_copy_gbps(0, size, true), "GB/s"});
  figures.push_back({"cuda_d2h_pinned_ceiling_gbps", cuda::testing::pinned_copy_gbps(0, size, false), "GB/s"});
#endif
  return figures;
}

// elemwise_add of two 64M-float arrays (3 x 256 MiB moved) against a plain
// device-to-device copy of one (2 x 256 MiB): the target is >= 0.8.
std::vector<Figure> bench_elemwise(const Options& options) {
  if (!have_gpu("cuda_elemwise")) return {};
  const int64_t n = int64_t{64} << 20;
  const double bytes = static_cast<double>(n) * 4;
  NDArray a = nd::ones({n}, {.device = kGpu});
  NDArray b = nd::ones({n}, {.device = kGpu});
  double add = timed(options, [&] { (a + b).wait_to_read(); });
  double relu = timed(options, [&] { nd::relu(a).wait_to_read(); });
  double copy = timed(options, [&] { a.copy_to(kGpu).wait_to_read(); });
  double add_gbps = 3 * bytes / add * 1e-9, copy_gbps = 2 * bytes / copy * 1e-9;
  return {{"cuda_add_gbps", add_gbps, "GB/s"},
          {"cuda_relu_gbps", 2 * bytes / relu * 1e-9, "GB/s"},
          {"cuda_add_vs_copy", add_gbps / copy_gbps, "x"}};
}

// A fused 4-op chain (mul, add, relu, mul) on one 64M-float array, through
// the NVRTC-generated kernel and through the interpreter kernel, against a
// device-to-device copy of the array: each reads 256 MiB and writes 256 MiB.
// The target is cuda_fused_vs_copy >= 0.8.
std::vector<Figure> bench_fused(const Options& options) {
  if (!have_gpu("cuda_fused")) return {};
  const int64_t n = int64_t{64} << 20;
  const double bytes = 2.0 * static_cast<double>(n) * 4;
  NDArray a = nd::ones({n}, {.device = kGpu});
  FusedProgram p = FusedProgram::parse("in=f;%1=mul(%0,1.5);%2=add(%1,-0.5);%3=relu(%2);%4=mul(%3,2);out=%4");
  OpAttrs attrs = OpAttrs::make(FusedElemwiseAttrs{FusedProgramRef::make(std::move(p))});
  auto run = [&] { invoke1(OpId::kFusedElemwise, {a}, attrs).wait_to_read(); };
  double generated = timed(options, run);
  double interpreted = generated;
#if defined(KILN_HAVE_CUDA)
  cuda::set_nvrtc_fused_enabled(false);
  interpreted = timed(options, run);
  cuda::set_nvrtc_fused_enabled(true);
#endif
  double copy = timed(options, [&] { a.copy_to(kGpu).wait_to_read(); });
  return {{"cuda_fused_nvrtc_gbps", bytes / generated * 1e-9, "GB/s"},
          {"cuda_fused_interpret_gbps", bytes / interpreted * 1e-9, "GB/s"},
          {"cuda_fused_copy_gbps", bytes / copy * 1e-9, "GB/s"},
          {"cuda_fused_vs_copy", copy / generated, "x"}};
}

// fp32 GEMM through cuBLAS (TF32 tensor cores unless KILN_CUDA_TF32=0).
std::vector<Figure> bench_matmul(const Options& options) {
  if (!have_gpu("cuda_matmul")) return {};
  const int64_t n = 4096;
  NDArray a = nd::random::normal({n, n}, 0, 1, {.device = kGpu});
  NDArray b = nd::random::normal({n, n}, 0, 1, {.device = kGpu});
  double s = timed(options, [&] { nd::dot(a, b).wait_to_read(); });
  return {{"cuda_matmul_4096_tflops", 2.0 * n * n * n / s * 1e-12, "TFLOP/s"}};
}

// 1000 dependent tiny ops (x = x + 1 on one element), then one wait: the
// per-op cost of the engine plus a launch plus a stream synchronize.
std::vector<Figure> bench_latency(const Options& options) {
  if (!have_gpu("cuda_op_latency")) return {};
  NDArray x0 = nd::zeros({1}, {.device = kGpu});
  double s = timed(options, [&] {
    NDArray x = x0;
    for (int i = 0; i < 1000; ++i) x = x + 1.0;
    x.wait_to_read();
  });
  return {{"cuda_op_latency_us", s / 1000 * 1e6, "us"}};
}

// The chapter's MLP (512 -> 256 -> 128 -> 2, hybridize_bench.cc's `mlp`) on
// cuda(0), one 1x512 sample per call: 1,000 calls then one wait, per-call
// microseconds, best of `repeat` after a warm-up round. Imperative,
// hybridized with CUDA graphs off (an engine push per call, a launch per
// kernel), and hybridized with graphs on (an engine push and one graph
// launch per call; the target on an H100 is <= 10 us). The graph statistics
// of the graphs-on round go to stderr.
double mlp_us(const Options& options, bool hybridize, bool graphs) {
  const bool before = graph_capture_enabled();
  graph_capture_set_enabled(graphs);
  double us = mlp_us_per_call(options, hybridize, kGpu, graph_capture_reset_stats);
  if (hybridize && graphs) std::fprintf(stderr, "cuda_mlp graphs: %s\n", graph_capture_stats().to_string().c_str());
  graph_capture_set_enabled(before);
  return us;
}

std::vector<Figure> bench_mlp(const Options& options) {
  if (!have_gpu("cuda_mlp")) return {};
  return {{"cuda_mlp_imperative_us", mlp_us(options, false, false), "us"},
          {"cuda_mlp_hybridized_nographs_us", mlp_us(options, true, false), "us"},
          {"cuda_mlp_hybridized_us", mlp_us(options, true, true), "us"}};
}

}  // namespace

void register_cuda_benchmarks() {
  add({"cuda_copy",
       {"cuda_h2d_gbps", "cuda_d2h_gbps", "cuda_d2d_gbps", "cuda_h2d_pinned_ceiling_gbps", "cuda_d2h_pinned_ceiling_gbps"},
       &bench_copy});
  add({"cuda_elemwise", {"cuda_add_gbps", "cuda_relu_gbps", "cuda_add_vs_copy"}, &bench_elemwise});
  add({"cuda_fused",
       {"cuda_fused_nvrtc_gbps", "cuda_fused_interpret_gbps", "cuda_fused_copy_gbps", "cuda_fused_vs_copy"},
       &bench_fused});
  add({"cuda_matmul", {"cuda_matmul_4096_tflops"}, &bench_matmul});
  add({"cuda_op_latency", {"cuda_op_latency_us"}, &bench_latency});
  add({"cuda_mlp",
       {"cuda_mlp_imperative_us", "cuda_mlp_hybridized_nographs_us", "cuda_mlp_hybridized_us"},
       &bench_mlp});
}

}  // namespace kiln::bench
