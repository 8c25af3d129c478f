// NVRTC compilation, cache and launch of the generated fused kernels
// (fused_nvrtc.h).
#include "backends/cuda/fused_nvrtc.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#if defined(KILN_HAVE_NVRTC)
#include <nvrtc.h>
#endif

#include "backends/cuda/check.h"
#include "backends/cuda/fused_codegen.h"
#include "ir/error.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
std::atomic<int64_t> g_compile_count{0};

struct CompiledKernel {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
  int max_blocks = 0;  // enough resident blocks to fill the device
};

// Compiled kernels by "<signature key>@<device>", kept until exit (never
// unloaded: a queued launch may still use one while static objects die).
class KernelCache {
 public:
  const CompiledKernel& get(const FusedProgram& p, const FusedSignature& sig, Device device) {
    std::string key = sig.key() + "@" + std::to_string(device.id);
    {
      std::shared_lock lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return *it->second;
    }
    std::unique_lock lock(mu_);  // held while compiling: each kernel is compiled once
    auto it = map_.find(key);
    if (it != map_.end()) return *it->second;
    auto k = std::make_unique<CompiledKernel>(compile(p, sig, device));
    return *map_.emplace(std::move(key), std::move(k)).first->second;
  }

 private:
  static CompiledKernel compile(const FusedProgram& p, const FusedSignature& sig, Device device) {
    int major = 0, minor = 0, sms = 0;
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.id), device);
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.id), device);
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device.id), device);
    std::string cubin = nvrtc_compile_cubin(fused_kernel_source(p, sig), major, minor, sig.program);
    CompiledKernel k;
    KILN_CUDA_CHECK(cudaLibraryLoadData(&k.library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), device);
    KILN_CUDA_CHECK(cudaLibraryGetKernel(&k.kernel, k.library, kFusedKernelName), device);
    k.max_blocks = std::max(1, sms) * (2048 / kThreads);
    g_compile_count.fetch_add(1, std::memory_order_relaxed);
    return k;
  }

  std::shared_mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<CompiledKernel>> map_;
};

KernelCache& cache() {
  static KernelCache* c = new KernelCache;  // never destroyed (see above)
  return *c;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

namespace {

// 1 generated kernels, 0 the interpreter.
std::atomic<int>& fused_mode() {
  static std::atomic<int> mode = [] {
    const char* env = std::getenv("KILN_CUDA_FUSED");
    return env == nullptr || std::strcmp(env, "interpret") != 0 ? 1 : 0;
  }();
  return mode;
}

}  // namespace

bool nvrtc_fused_enabled() {
#if defined(KILN_HAVE_NVRTC)
  return fused_mode().load(std::memory_order_relaxed) == 1;
#else
  return false;
#endif
}

void set_nvrtc_fused_enabled(bool enabled) { fused_mode().store(enabled ? 1 : 0, std::memory_order_relaxed); }

std::string nvrtc_compile_cubin(const std::string& source, int major, int minor, std::string_view what) {
#if defined(KILN_HAVE_NVRTC)
  auto fail = [&](nvrtcResult r, const char* call, const std::string& log) {
    throw DeviceError(fmt::format("NVRTC: {} failed for the kernel of _kiln_fused_elemwise program \"{}\" (sm_{}{}): "
                                  "{}{}{}",
                                  call, what, major, minor, nvrtcGetErrorString(r), log.empty() ? "" : "\n", log));
  };
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nvrtcCreateProgram(&prog, source.c_str(), "kiln_fused.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) fail(r, "nvrtcCreateProgram", "");
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> guard(&prog, [](nvrtcProgram* q) { nvrtcDestroyProgram(q); });
  const std::string arch = fmt::format("--gpu-architecture=sm_{}{}", major, minor);
  const char* options[] = {arch.c_str(), "-default-device", "--std=c++17"};
  r = nvrtcCompileProgram(prog, 3, options);
  if (r != NVRTC_SUCCESS) {
    size_t size = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size > 1) {
      log.resize(size);
      if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) log.clear();
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    }
    fail(r, "nvrtcCompileProgram", log);
  }
  size_t size = 0;
  r = nvrtcGetCUBINSize(prog, &size);
  if (r != NVRTC_SUCCESS) fail(r, "nvrtcGetCUBINSize", "");
  std::string cubin(size, '\0');
  r = nvrtcGetCUBIN(prog, cubin.data());
  if (r != NVRTC_SUCCESS) fail(r, "nvrtcGetCUBIN", "");
  return cubin;
#else
  throw NotSupported(fmt::format("_kiln_fused_elemwise program \"{}\": Kiln was built without NVRTC", what));
#endif
}

void run_fused_nvrtc(const FusedProgramRef& ref, std::span<const TensorView> in, std::span<const TensorView> out,
                     Device device, void* stream) {
  const FusedProgram& p = ref.program();
  const Shape& shape = out[0].shape;
  const int64_t n = shape.size();
  if (n == 0) return;
  KILN_CHECK(p.inputs.size() <= kFusedKernelMaxOperands && p.outputs.size() <= kFusedKernelMaxOperands, NotSupported,
             "_kiln_fused_elemwise on {}: the generated kernels take at most {} inputs and outputs (program \"{}\")",
             device, kFusedKernelMaxOperands, ref.text());
  FusedSignature sig;
  sig.program = ref.text();
  sig.dtype = out[0].dtype;
  sig.index64 = n > std::numeric_limits<int32_t>::max();
  const int64_t width = sig.dtype == DType::kFloat32 ? 4 : 8;
  bool vector = n >= width;
  bool grouped = true;  // every channel input constant over each group of `width` positions
  FusedKernelArgs args{};
  args.n = n;
  for (size_t j = 0; j < p.inputs.size(); ++j) {
    args.in[j] = in[j].data;
    if (p.inputs[j] == FusedInputKind::kFull) vector = vector && aligned16(in[j].data);
    if (p.inputs[j] != FusedInputKind::kChannel && p.inputs[j] != FusedInputKind::kRow) continue;
    int axis = fused_broadcast_axis(in[j].shape, shape);
    KILN_CHECK(axis >= 0, InternalError, "internal error: _kiln_fused_elemwise: input {} ({}) does not broadcast to {}",
               j, in[j].shape, shape);
    args.inner[j] = fused_inner_size(shape, axis);
    args.len[j] = shape[axis];
    if (p.inputs[j] == FusedInputKind::kChannel) grouped = grouped && args.inner[j] % width == 0;
    if (!sig.index64) {
      FastDiv a = fused_fast_div(static_cast<uint32_t>(args.inner[j]));
      FastDiv b = fused_fast_div(static_cast<uint32_t>(args.len[j]));
      args.inner_mul[j] = a.mul, args.inner_shift[j] = a.shift;
      args.len_mul[j] = b.mul, args.len_shift[j] = b.shift;
    }
  }
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    args.out[j] = out[j].data;
    vector = vector && aligned16(out[j].data);
  }
  sig.vector = vector;
  sig.channel_grouped = vector && grouped;
  const CompiledKernel& k = cache().get(p, sig, device);
  const int64_t work = vector ? n / width : n;
  const int blocks = static_cast<int>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, k.max_blocks));
  void* params[] = {&args};
  KILN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(k.kernel), dim3(blocks), dim3(kThreads), params, 0,
                                   static_cast<cudaStream_t>(stream)),
                  device);
}

int64_t nvrtc_fused_compile_count() { return g_compile_count.load(std::memory_order_relaxed); }

}  // namespace kiln::cuda
