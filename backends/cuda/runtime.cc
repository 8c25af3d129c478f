// The CUDA backend's entry points (compiled instead of backends/cuda_absent.cc
// when CMake finds the CUDA Toolkit; see cmake/KilnDeps.cmake): the GPU count,
// the kernel table's CUDA column and the device allocator.
#include <cuda_runtime_api.h>

#include <memory>

#include "backends/cuda/caching_allocator.h"
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

void register_cuda_elemwise_kernels();  // elemwise.cc (+ the init family)
void register_cuda_matrix_kernels();    // matrix.cc
void register_cuda_reduce_kernels();    // reduce.cc
void register_cuda_linalg_kernels();    // linalg.cc (+ FullyConnected)
void register_cuda_nn_kernels();        // nn.cc
void register_cuda_optimizer_kernels(); // optimizer.cc
void register_cuda_conv_kernels();      // conv.cc (cuDNN; BatchNorm only without it)
void register_cuda_index_kernels();     // indices.cc
void register_cuda_fused_kernels();     // fused.cc (an interpreter of fused programs)
void register_cuda_layer_norm_kernels();  // layer_norm.cc

// Registered whether or not a GPU is present: the table says what this build
// can run; check_device refuses cuda(i) when there is no such GPU.
void register_cuda_widening_kernel();  // backends/cuda/widen.cc

void register_cuda_kernels() {
  register_cuda_elemwise_kernels();
  register_cuda_matrix_kernels();
  register_cuda_reduce_kernels();
  register_cuda_linalg_kernels();
  register_cuda_nn_kernels();
  register_cuda_optimizer_kernels();
  register_cuda_conv_kernels();
  register_cuda_index_kernels();
  register_cuda_fused_kernels();
  register_cuda_widening_kernel();
  register_cuda_layer_norm_kernels();
}

namespace storage {
std::unique_ptr<Pool> make_cuda_pool(Device device) { return cuda::make_caching_allocator(device); }
}  // namespace storage

}  // namespace kiln
