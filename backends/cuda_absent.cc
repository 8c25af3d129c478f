// Linked when Kiln is built without CUDA: no CUDA devices, no CUDA kernels.
#include <memory>

#include "ir/device.h"
#include "ir/error.h"
#include "runtime/device_copy.h"
#include "runtime/engine_impl.h"
#include "runtime/storage.h"

namespace kiln {

int cuda_device_count() { return 0; }
void register_cuda_kernels() {}

void copy_between_devices(void*, Device to, const void*, Device from, size_t) {
  throw DeviceError(fmt::format("copy from {} to {}: Kiln was built without CUDA", from, to));
}

namespace storage {
std::unique_ptr<Pool> make_cuda_pool(Device device) {
  throw DeviceError(fmt::format("{}: Kiln was built without CUDA", device));
}
}  // namespace storage

namespace engine::detail {
void run_on_cuda_lane(Fn&, RunContext ctx) {
  throw DeviceError(fmt::format("{}: Kiln was built without CUDA", ctx.device));
}
void drain_cuda_lanes() {}
}  // namespace engine::detail

}  // namespace kiln
