// The GPU's widening adaptor (runtime/kernel_widen.h): float16/bfloat16 calls
// of kernels that compute in float32, with temporaries that are freed once
// the op's stream has run them (cuda::Scratch).
#include <memory>
#include <vector>

#include "backends/cuda/device_runtime.h"
#include "backends/cuda/kernel_util.h"
#include "runtime/kernel_widen.h"

namespace kiln {
namespace {

class CudaTemps final : public WidenTemps {
 public:
  explicit CudaTemps(Device device) : device_(device) {}
  void* alloc(size_t bytes) override {
    return scratch_.emplace_back(std::make_unique<cuda::Scratch>(device_, bytes))->get();
  }

 private:
  Device device_;
  std::vector<std::unique_ptr<cuda::Scratch>> scratch_;
};

}  // namespace

void cuda::widen(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  CudaTemps temps(ctx.run.device);
  run_widened(ctx, in, out, temps);
}

void register_cuda_widening_kernel() { register_widening_kernel(DeviceKind::kCUDA, cuda::widen); }

}  // namespace kiln
