// The CUDA device backend (compiled when CMake finds the CUDA Toolkit; see
// cmake/KilnDeps.cmake): the GPU count, the caching allocator, the lanes
// (engine_lane.cc), copies (copy.cc) and the kernel table's CUDA column.
#include <cuda_runtime_api.h>

#include <memory>

#include "backends/cuda/caching_allocator.h"
#include "backends/cuda/device_runtime.h"
#include "ir/device.h"
#include "ir/error.h"
#include "runtime/device_backend.h"
#include "runtime/graph_capture.h"
#include "runtime/storage.h"

namespace kiln {

namespace {

int gpu_count() {
  // Asked once: the answer cannot change within a process, and check_device
  // asks on every CUDA device lookup.
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

}  // namespace

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

namespace cuda {
GraphCapture& graph_capture();  // graph_capture.cc
}

namespace {

class CudaBackend final : public DeviceBackend {
 public:
  int device_count() override { return gpu_count(); }

  std::string description() override {
    std::string s;
    for (int i = 0, n = gpu_count(); i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", Device::cuda(i));
    return s;
  }

  std::unique_ptr<storage::Pool> make_pool(Device device) override { return cuda::make_caching_allocator(device); }

  void run(engine::Fn& fn, engine::RunContext ctx) override { cuda::run_on_lane(fn, ctx); }
  void drain() override { cuda::drain_lanes(); }

  void copy(void* dst, Device to, const void* src, Device from, size_t bytes) override {
    cuda::copy(dst, to, src, from, bytes);
  }

  GraphCapture* graph_capture() override { return &cuda::graph_capture(); }

  void register_kernels() override {
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
};

}  // namespace

void register_cuda_device_backend() { register_device_backend(DeviceKind::kCUDA, std::make_unique<CudaBackend>()); }

}  // namespace kiln
