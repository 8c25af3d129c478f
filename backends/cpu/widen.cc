// The CPU's widening adaptor (runtime/kernel_widen.h): float16/bfloat16 calls
// of kernels that compute in float32, with temporaries from cpu's pool.
#include "backends/cpu/widen.h"

#include <vector>

#include "runtime/kernel_widen.h"
#include "runtime/storage.h"

namespace kiln {
namespace {

class CpuTemps final : public WidenTemps {
 public:
  explicit CpuTemps(Device device) : pool_(storage::pool(device)) {}
  ~CpuTemps() override {
    for (const storage::Block& b : blocks_) pool_.free(b);
  }
  void* alloc(size_t bytes) override { return blocks_.emplace_back(pool_.alloc(bytes)).ptr; }

 private:
  storage::Pool& pool_;
  std::vector<storage::Block> blocks_;
};

}  // namespace

void cpu::widen(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
  CpuTemps temps(ctx.run.device);
  run_widened(ctx, in, out, temps);
}

void register_cpu_widening_kernel() { register_widening_kernel(DeviceKind::kCPU, cpu::widen); }

}  // namespace kiln
