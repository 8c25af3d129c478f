// The CUDA backend's entry points (compiled instead of backends/cuda_absent.cc
// when CMake finds the CUDA Toolkit; see cmake/KilnDeps.cmake).
//
// For now this only counts GPUs. Kernels, streams and the device allocator come
// with the CUDA backend issue; until then cuda(i) devices are visible to
// `kiln info` and check_device, but no array can be allocated on them.
#include <cuda_runtime_api.h>

#include <memory>

#include "ir/device.h"
#include "ir/error.h"
#include "runtime/storage.h"

namespace kiln {

int cuda_device_count() {
  // Asked once: the answer cannot change within a process, and check_device
  // calls this on every CUDA device lookup.
  static const int count = [] {
    int n = 0;
    // No driver, no GPU or a driver too old for this runtime: report none.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky error state
      return 0;
    }
    return n;
  }();
  return count;
}

// Registers nothing yet: the CUDA backend issue adds kernels here.
void register_cuda_kernels() {}

namespace storage {
std::unique_ptr<Pool> make_cuda_pool(Device device) {
  throw DeviceError(fmt::format("{}: no CUDA kernels/allocator yet (issue: CUDA backend)", device));
}
}  // namespace storage

}  // namespace kiln
