// `kiln info`: one `key: value` line per fact about this build and machine.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <string>

#include "backends/cpu/conv_winograd_bf16.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/openblas_gemm.h"
#include "frontend/kvstore.h"
#include "ir/device.h"
#include "runtime/device_backend.h"
#include "runtime/engine.h"
#include "runtime/graph_capture.h"

#ifndef KILN_CUDA_VERSION
#define KILN_CUDA_VERSION ""
#endif
#ifndef KILN_CUDNN_VERSION
#define KILN_CUDNN_VERSION ""
#endif
#ifndef KILN_NCCL_VERSION
#define KILN_NCCL_VERSION ""
#endif
#ifndef KILN_LLVM_VERSION
#define KILN_LLVM_VERSION ""
#endif
#ifndef KILN_ONNX_VERSION
#define KILN_ONNX_VERSION ""
#endif
#ifndef KILN_MPI_VERSION
#define KILN_MPI_VERSION ""
#endif

namespace kiln::cli {

namespace {

std::string or_no(std::string s) { return s.empty() ? "no" : s; }

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();  // the library loaded at run time
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
                        : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                        : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                             : "other";
  return fmt::format("{}.{}.{} (CPU runtime {})", v->major, v->minor, v->patch, runtime);
}

std::string cuda_version() {
  std::string cuda = KILN_CUDA_VERSION;
  if (cuda.empty()) return "no";
  return fmt::format("{} (cuDNN {}, NCCL {})", cuda, or_no(KILN_CUDNN_VERSION), or_no(KILN_NCCL_VERSION));
}

// The library loaded at run time (the header's version is on the cuda line),
// and whether the nccl KVStore can run here.
std::string nccl_status() {
  std::string why = kv::nccl_unavailable();
  std::string lib = kv::nccl_description();
  if (why.empty()) return lib + ", nccl KVStore available";
  return lib.starts_with("no") ? lib : fmt::format("{}; nccl KVStore unavailable: {}", lib, why);
}

std::string openmp_version() {
#ifdef _OPENMP
  // _OPENMP is the release date of the specification the compiler implements.
  const char* spec = _OPENMP >= 202011 ? "5.1" : _OPENMP >= 201811 ? "5.0" : _OPENMP >= 201511 ? "4.5" : "< 4.5";
  return fmt::format("{} ({}), max {} threads", spec, _OPENMP, omp_get_max_threads());
#else
  return "no";
#endif
}

std::string devices() {
  std::string s;
  for (int k = 0; k < kNumDeviceKinds; ++k) {
    DeviceBackend* backend = find_device_backend(static_cast<DeviceKind>(k));
    std::string line = backend ? backend->description() : "";
    if (!line.empty()) s += (s.empty() ? "" : ", ") + line;
  }
  return s;
}

// Which 3x3 convolutions run as Winograd here (KILN_WINOGRAD=0 turns them off).
std::string winograd_status() {
  const int mode = cpu::winograd_mode();
  if (mode == 0) return "off (KILN_WINOGRAD=0)";
  std::string out = mode == 4 ? "float32 F(4x4) and F(2x2)" : "float32 F(2x2)";
  if (cpu::winograd_bf16_cpu())
    out += ", bfloat16 F(2x2) (avx512_bf16, no AMX)";
  else if (cpu::low_precision_flags() == "none")
    out += ", bfloat16 as float32 on widened copies (this CPU has no AVX-512)";
  else
    out += ", bfloat16 direct (the bf16 Winograd runs on AVX512-BF16 CPUs without AMX)";
  return out;
}

void print_info() {
  engine::Engine& eng = engine::get();
  auto line = [](std::string_view key, const std::string& value) { fmt::print("{}: {}\n", key, value); };
  line("version", KILN_VERSION);
  line("build type", KILN_BUILD_TYPE);
  line("compiler", KILN_COMPILER);
  line("onednn", onednn_version());
  line("openblas", cpu::openblas::description());
  line("cuda", cuda_version());
  line("llvm", or_no(KILN_LLVM_VERSION));
  line("mpi", or_no(KILN_MPI_VERSION));
  line("nccl", nccl_status());
  line("onnx", or_no(KILN_ONNX_VERSION));
  line("openmp", openmp_version());
  line("cpu", cpu::features().model);
  line("cpu 16-bit float flags", cpu::low_precision_flags());
  line("bfloat16 compute", cpu::low_precision_support(DType::kBfloat16));
  line("float16 compute", cpu::low_precision_support(DType::kFloat16));
  line("winograd", winograd_status());
  line("threads per device", std::to_string(eng.cpu_threads(Device::cpu(0))));
  line("devices", devices());
  line("engine", eng.kind() == engine::Kind::kNaive ? "naive" : "threaded");
  line("max pending", fmt::format("{} MiB", eng.max_pending_bytes() >> 20));
  // Hybridized blocks on devices that record graphs (KILN_CUDA_GRAPHS=0 turns it off).
  line("cuda graphs", fmt::format("{}; {}", graph_capture_enabled() ? "on" : "off", graph_capture_stats().to_string()));
}

}  // namespace

void add_info_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("info", "Print versions, devices and engine settings");
  cmd->callback(print_info);
}

}  // namespace kiln::cli
