// Convolution benchmarks: Winograd (backends/cpu/conv_winograd.h) against the
// direct oneDNN convolution on the 3x3 stride-1 layers of d2l's ResNet-18
// (12.6: 1x28x28 images, batch 256), forward, backward-data and
// backward-weight.
//
// The machine is shared, so the modes alternate inside one process (direct,
// F(2x2), F(4x4), direct, ...) and each reports its best of `repeat` rounds.
// Figures per stage (C channels, S x S images): the direct and Winograd
// milliseconds, "effective" GFLOP/s (the direct convolution's 2 * 9 * C * C *
// S * S * batch flops over the time, comparable with the CPU's FMA peak) and
// the speedup of the default mode (F(4x4)) and of F(2x2) over direct.
// The forward figures run in predict mode and so reuse the weights'
// transformed or reordered forms (backends/cpu/weight_cache.h);
// backward-data transforms them per call. `infer_resnet18_weight_cache`
// alternates the weight cache off and on.
#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "backends/cpu/conv_winograd.h"
#include "backends/cpu/conv_winograd_bf16.h"
#include "backends/cpu/weight_cache.h"
#include "bench/bench.h"
#include "frontend/autograd.h"
#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "ir/ops/conv.h"
#include "models/zoo.h"
#include "runtime/engine.h"

namespace kiln::bench {

namespace {

struct Stage {
  int64_t channels, size;
};
constexpr Stage kStages[] = {{64, 28}, {128, 14}, {256, 7}, {512, 4}};
constexpr int64_t kBatch = 256;
constexpr int kModes[] = {0, 2, 4};  // direct, F(2x2), F(4x4)

std::string stage_name(const Stage& s) { return fmt::format("conv3x3_{}x{}", s.channels, s.size); }

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Seconds of `fn` (which pushes work and returns the array to wait for):
// wall-clock, or with KILN_BENCH_CPU_TIME=1 the process's CPU time, which a
// loaded machine disturbs far less (use it with KILN_CPU_THREADS=1: idle
// OpenMP threads spin and would count).
template <typename F>
double time_once(F&& fn) {
  static const bool cpu_time = std::getenv("KILN_BENCH_CPU_TIME") != nullptr;
  engine::wait_all();
  auto start = Clock::now();
  double cpu_start = process_cpu_seconds();
  fn().wait_to_read();
  return cpu_time ? process_cpu_seconds() - cpu_start : seconds_since(start);
}

// Best seconds per mode, modes alternating round by round after a warm-up round.
template <typename F>
std::array<double, 3> alternate(const Options& options, F&& fn) {
  std::array<double, 3> best{1e30, 1e30, 1e30};
  const int saved = cpu::winograd_mode();
  for (int round = 0; round <= options.repeat; ++round) {
    for (int m = 0; m < 3; ++m) {
      cpu::winograd_set_mode(kModes[m]);
      double s = time_once(fn);
      if (round > 0) best[m] = std::min(best[m], s);
    }
  }
  cpu::winograd_set_mode(saved);
  return best;
}

void report(std::vector<Figure>& figures, const std::string& name, double flops, const std::array<double, 3>& s) {
  figures.push_back({name + "_direct_ms", s[0] * 1e3, "ms"});
  figures.push_back({name + "_winograd_ms", s[2] * 1e3, "ms"});
  figures.push_back({name + "_direct_gflops", flops / s[0] * 1e-9, "GFLOP/s"});
  figures.push_back({name + "_winograd_gflops", flops / s[2] * 1e-9, "GFLOP/s"});
  figures.push_back({name + "_winograd_speedup", s[0] / s[2], "x"});
  figures.push_back({name + "_winograd2_speedup", s[0] / s[1], "x"});
}

std::vector<Figure> bench_conv_winograd(const Options& options) {
  std::vector<Figure> figures;
  for (const Stage& st : kStages) {
    NDArray x = nd::random::uniform({kBatch, st.channels, st.size, st.size}, -1, 1);
    NDArray w = nd::random::uniform({st.channels, st.channels, 3, 3}, -0.1, 0.1);
    NDArray b = nd::random::uniform({st.channels}, -1, 1);
    ConvolutionAttrs a{.kernel = {3, 3}, .pad = {1, 1}, .num_filter = static_cast<int>(st.channels)};
    const double flops = 2.0 * 9 * st.channels * st.channels * st.size * st.size * kBatch;
    report(figures, stage_name(st), flops, alternate(options, [&] { return nd::convolution(x, w, b, a); }));
    ConvolutionBackwardDataAttrs bd;
    static_cast<ConvolutionAttrs&>(bd) = a;
    bd.data_shape = x.shape();
    report(figures, stage_name(st) + "_bwd_data", flops, alternate(options, [&] {
             return invoke1(OpId::kConvolutionBackwardData, {x, w}, OpAttrs::make(bd));
           }));
    // The weight gradient of the same layer: (out_grad, data) -> d_weight; x
    // stands in for out_grad (same shape).
    report(figures, stage_name(st) + "_bwd_weight", flops, alternate(options, [&] {
             return invoke1(OpId::kConvolutionBackwardWeight, {x, x}, OpAttrs::make(a));
           }));
  }
  return figures;
}

// bf16 3x3 layers, direct and Winograd alternating: channel-last forwards in
// predict mode (weights cached: inference graphs), and channel-first
// forwards and data gradients in train mode (weights transformed per call:
// training). Empty where this CPU does not run the bf16 kernel.
std::vector<Figure> bench_conv_bf16_winograd(const Options& options) {
  std::vector<Figure> figures;
  if (!cpu::winograd_bf16_cpu()) return figures;
  auto bf16 = [](const Shape& shape, double scale) {
    return nd::random::uniform(shape, -scale, scale).astype(DType::kBfloat16);
  };
  for (const Stage& st : kStages) {
    const int64_t C = st.channels, S = st.size;
    const double flops = 2.0 * 9 * C * C * S * S * kBatch;
    const double products = 2.0 * 16 * C * C * static_cast<double>((S + 1) / 2 * ((S + 1) / 2)) * kBatch;
    auto record = [&](const std::string& name, const std::array<double, 3>& s) {
      figures.push_back({name + "_direct_ms", s[0] * 1e3, "ms"});
      figures.push_back({name + "_winograd_ms", s[2] * 1e3, "ms"});
      figures.push_back({name + "_direct_gflops", flops / s[0] * 1e-9, "GFLOP/s"});
      figures.push_back({name + "_winograd_products_gflops", products / s[2] * 1e-9, "GFLOP/s"});
      figures.push_back({name + "_winograd_speedup", s[0] / s[2], "x"});
    };
    ConvolutionAttrs a{.kernel = {3, 3}, .pad = {1, 1}, .num_filter = static_cast<int>(C)};
    NDArray b = bf16({C}, 1);
    {
      autograd::PredictMode predict;
      ConvolutionAttrs last = a;
      last.layout = "NHWC";
      NDArray x = bf16({kBatch, S, S, C}, 1), w = bf16({C, 3, 3, C}, 0.1);
      record(fmt::format("conv3x3_bf16_{}x{}", C, S),
             alternate(options, [&] { return nd::convolution(x, w, b, last); }));
    }
    autograd::TrainMode train;
    NDArray x = bf16({kBatch, C, S, S}, 1), w = bf16({C, C, 3, 3}, 0.1);
    record(fmt::format("conv3x3_bf16_nchw_{}x{}", C, S),
           alternate(options, [&] { return nd::convolution(x, w, b, a); }));
    ConvolutionBackwardDataAttrs bd;
    static_cast<ConvolutionAttrs&>(bd) = a;
    bd.data_shape = x.shape();
    record(fmt::format("conv3x3_bf16_nchw_{}x{}_bwd_data", C, S), alternate(options, [&] {
             return invoke1(OpId::kConvolutionBackwardData, {x, w}, OpAttrs::make(bd));
           }));
    // (out_grad, data) -> d_weight; x stands in for out_grad (same shape).
    ConvolutionAttrs nb = a;
    nb.no_bias = true;
    record(fmt::format("conv3x3_bf16_nchw_{}x{}_bwd_weight", C, S), alternate(options, [&] {
             return invoke1(OpId::kConvolutionBackwardWeight, {x, x}, OpAttrs::make(nb));
           }));
  }
  return figures;
}

// The chapter's ResNet-18, seeded, initialized on cpu(0) and hybridized (as
// `infer_resnet18_hybridized` runs it). The caller draws its input next, so
// the input is the same in every benchmark that uses this.
nn::HybridSequential hybridized_resnet18() {
  nd::random::seed(0);
  nn::HybridSequential net = models::make("resnet18", 10);
  net.initialize(init::Xavier(), {Device::cpu(0)});
  net.hybridize(true);
  return net;
}

// ResNet-18 inference (predict mode, batch 256 of 1x28x28, hybridized as
// `infer_resnet18_hybridized` runs it) with Winograd off, F(2x2) and F(4x4)
// alternating batch by batch in one process.
std::vector<Figure> bench_resnet18_winograd(const Options& options) {
  nn::HybridSequential net = hybridized_resnet18();
  NDArray data = nd::random::uniform({kBatch, 1, 28, 28});
  autograd::PredictMode predict;
  auto s = alternate(options, [&] { return net(data); });
  return {{"infer_resnet18_winograd_off_ips", kBatch / s[0], "img/s"},
          {"infer_resnet18_winograd_ips", kBatch / s[2], "img/s"},
          {"infer_resnet18_winograd_speedup", s[0] / s[2], "x"},
          {"infer_resnet18_winograd2_speedup", s[0] / s[1], "x"}};
}

// The same inference with the weight cache (backends/cpu/weight_cache.h) off
// and on, alternating batch by batch in one process (F(4x4) Winograd): what
// transforming and reordering the weights on every call costs.
std::vector<Figure> bench_resnet18_weight_cache(const Options& options) {
  nn::HybridSequential net = hybridized_resnet18();
  NDArray data = nd::random::uniform({kBatch, 1, 28, 28});
  autograd::PredictMode predict;
  const bool enabled = cpu::weight_cache_enable(true);
  cpu::weight_cache_clear();  // what this model holds, without earlier benchmarks' entries
  double best[2] = {1e30, 1e30};
  for (int round = 0; round <= options.repeat; ++round) {
    for (int cached = 0; cached < 2; ++cached) {
      cpu::weight_cache_enable(cached == 1);
      const double s = time_once([&] { return net(data); });
      if (round > 0) best[cached] = std::min(best[cached], s);
    }
  }
  cpu::weight_cache_enable(enabled);
  const cpu::WeightCacheStats stats = cpu::weight_cache_stats();
  return {{"infer_resnet18_weight_cache_off_ips", kBatch / best[0], "img/s"},
          {"infer_resnet18_weight_cache_ips", kBatch / best[1], "img/s"},
          {"infer_resnet18_weight_cache_speedup", best[0] / best[1], "x"},
          {"infer_resnet18_weight_cache_mb", static_cast<double>(stats.bytes) / (1024.0 * 1024.0), "MiB"}};
}

std::vector<std::string> figure_names() {
  std::vector<std::string> names;
  for (const Stage& st : kStages)
    for (const std::string& kind : {std::string(), std::string("_bwd_data"), std::string("_bwd_weight")})
      for (const char* f : {"_direct_ms", "_winograd_ms", "_direct_gflops", "_winograd_gflops", "_winograd_speedup",
                            "_winograd2_speedup"})
        names.push_back(stage_name(st) + kind + f);
  return names;
}

std::vector<std::string> bf16_figure_names() {
  std::vector<std::string> names;
  for (const Stage& st : kStages)
    for (const char* kind : {"conv3x3_bf16_{}x{}", "conv3x3_bf16_nchw_{}x{}", "conv3x3_bf16_nchw_{}x{}_bwd_data",
                             "conv3x3_bf16_nchw_{}x{}_bwd_weight"})
      for (const char* f : {"_direct_ms", "_winograd_ms", "_direct_gflops", "_winograd_products_gflops",
                            "_winograd_speedup"})
        names.push_back(fmt::format(fmt::runtime(kind), st.channels, st.size) + f);
  return names;
}

}  // namespace

void register_conv_benchmarks() {
  add({"conv3x3_bf16_winograd", bf16_figure_names(), &bench_conv_bf16_winograd});
  add({"conv3x3_winograd", figure_names(), &bench_conv_winograd});
  add({"infer_resnet18_winograd",
       {"infer_resnet18_winograd_off_ips", "infer_resnet18_winograd_ips", "infer_resnet18_winograd_speedup",
        "infer_resnet18_winograd2_speedup"},
       &bench_resnet18_winograd});
  add({"infer_resnet18_weight_cache",
       {"infer_resnet18_weight_cache_off_ips", "infer_resnet18_weight_cache_ips", "infer_resnet18_weight_cache_speedup",
        "infer_resnet18_weight_cache_mb"},
       &bench_resnet18_weight_cache});
}

}  // namespace kiln::bench
