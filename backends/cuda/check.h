// Error checking for CUDA, cuBLAS and cuDNN calls: every failure becomes a
// kiln::Error naming the call, the device and the library's error text.
//
//   KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream), device);
//   // throws DeviceError "cudaMemcpyAsync(dst, src, n, ...) on cuda(0) failed: cudaErrorInvalidValue (invalid argument)"
//
// Engine operations add the op's name in front (runtime/engine.cc), so an
// error raised in a kernel reads "Convolution on cuda(0): cudnnConvolutionForward(...) ...".
// Out-of-memory results throw OutOfMemory instead of DeviceError.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "ir/device.h"
#include "ir/error.h"

namespace kiln::cuda {

// Throws for `status` != cudaSuccess, clearing CUDA's last-error state first
// (a sticky error, such as an illegal address, stays: every later call fails
// too, and the message says so).
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, Device device);
[[noreturn]] void throw_library_error(const char* library, int status, const char* text, const char* call,
                                      Device device);

}  // namespace kiln::cuda

#define KILN_CUDA_CHECK(call, device)                                              \
  do {                                                                             \
    cudaError_t kiln_cuda_status_ = (call);                                        \
    if (kiln_cuda_status_ != cudaSuccess) [[unlikely]]                             \
      ::kiln::cuda::throw_cuda_error(kiln_cuda_status_, #call, (device));          \
  } while (0)
