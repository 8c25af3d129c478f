// Linked when Kiln is built without CUDA: no CUDA devices, no CUDA kernels.
#include <memory>

#include "ir/device.h"
#include "ir/error.h"
#include "runtime/storage.h"

namespace kiln {

int cuda_device_count() { return 0; }
void register_cuda_kernels() {}

namespace storage {
std::unique_ptr<Pool> make_cuda_pool(Device device) {
  throw DeviceError(fmt::format("{}: Kiln was built without CUDA", device));
}
}  // namespace storage

}  // namespace kiln
