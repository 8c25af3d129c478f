#include "backends/cuda/check.h"

namespace kiln::cuda {

void throw_cuda_error(cudaError_t status, const char* call, Device device) {
  (void)cudaGetLastError();  // clears a non-sticky error so the next call starts clean
  // A sticky error (the context is corrupted) makes every later call fail the same way.
  bool sticky = status == cudaErrorIllegalAddress || status == cudaErrorLaunchFailure ||
                status == cudaErrorAssert || status == cudaErrorIllegalInstruction ||
                status == cudaErrorMisalignedAddress || status == cudaErrorHardwareStackError;
  std::string message = fmt::format("{} on {} failed: {} ({}){}", call, device, cudaGetErrorName(status),
                                    cudaGetErrorString(status),
                                    sticky ? "; the CUDA context is now unusable: restart the process (run with "
                                             "CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to find the kernel)"
                                           : "");
  if (status == cudaErrorMemoryAllocation) throw OutOfMemory(message);
  throw DeviceError(message);
}

void throw_library_error(const char* library, int status, const char* text, const char* call, Device device) {
  throw DeviceError(fmt::format("{} on {} failed: {} status {} ({})", call, device, library, status, text));
}

}  // namespace kiln::cuda
