// _kiln_fused_elemwise on CUDA through kernels generated per program
// (fused_codegen.h) and compiled by NVRTC at first use.
//
//   std::string cubin = cuda::nvrtc_compile_cubin(source, 9, 0, program_text);  // no GPU needed
//   cuda::run_fused_nvrtc(ref, in, out, device, stream);  // compiles once per signature and device, launches
//
// The kernel of a (signature, device) pair is compiled for the device's
// compute capability (`--gpu-architecture=sm_XY -default-device --std=c++17`,
// CUBIN), loaded with the runtime API (cudaLibraryLoadData,
// cudaLibraryGetKernel; nothing links libcuda) and kept until exit. The
// interpreter kernel (fused.cu) stays the fallback and the reference:
// KILN_CUDA_FUSED=interpret in the environment (read once) makes the CUDA
// kernel use it (float32 only; 16-bit then goes through the widening adaptor).
//
// Errors: a compile failure throws DeviceError naming the program text, the
// architecture and NVRTC's log; load and launch failures throw as
// KILN_CUDA_CHECK does.
// Thread safety: every function may be called from any thread; the cache is
// locked, and a kernel is compiled once even when threads race for it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ir/device.h"
#include "ir/ops/fused.h"
#include "runtime/kernel.h"

namespace kiln::cuda {

// Whether NVRTC-generated kernels run fused programs (Kiln built with NVRTC
// and KILN_CUDA_FUSED is not "interpret").
bool nvrtc_fused_enabled();
// Overrides the environment (tests and benchmarks; call while no fused op runs).
void set_nvrtc_fused_enabled(bool enabled);

// CUBIN of `source` for sm_<major><minor>. `what` names the source in errors
// (the program text).
std::string nvrtc_compile_cubin(const std::string& source, int major, int minor, std::string_view what);

// Runs `ref`'s program over out[0]'s shape: in/out as the op's kernel gets
// them (one dtype: float32, float16 or bfloat16; an output may be a full
// input's buffer), queued on `stream` (a cudaStream_t) of `device` (the
// current device). This header includes no CUDA header.
void run_fused_nvrtc(const FusedProgramRef& ref, std::span<const TensorView> in, std::span<const TensorView> out,
                     Device device, void* stream);

// Kernels compiled so far (all signatures and devices), for tests.
int64_t nvrtc_fused_compile_count();

}  // namespace kiln::cuda
