// Faulty kernels for the error-surfacing tests (testing.h).
#include <cuda_runtime_api.h>

#include <string>

#include "backends/cuda/testing.h"

namespace kiln::cuda::testing {

namespace {

__global__ void write_kernel(float* p) { p[threadIdx.x] = 1.0f; }

}  // namespace

std::string no_device_line() {
  int n = 0;
  cudaError_t status = cudaGetDeviceCount(&n);
  std::string why = status == cudaSuccess ? std::to_string(n) + " device(s)"
                                          : std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
  (void)cudaGetLastError();
  return "no CUDA device (cudaGetDeviceCount: " + why + "); skipping";
}

void launch_bad_config(void* stream) {
  float* p = nullptr;
  write_kernel<<<1, 2048, 0, static_cast<cudaStream_t>(stream)>>>(p);
}

void launch_illegal_address(void* stream) {
  write_kernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(nullptr);
}

}  // namespace kiln::cuda::testing
