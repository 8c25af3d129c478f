// The CPU device backend: every cpu(i) is a logical device sharing the
// machine's cores; memory is the host's, operations finish inside run().
#include <cstring>
#include <memory>
#include <thread>

#include "backends/cpu/cpu_features.h"
#include "runtime/device_backend.h"

namespace kiln {

void register_cpu_kernels();  // register.cc

namespace {

class CpuBackend final : public DeviceBackend {
 public:
  // The engine gives each cpu(i) its own lanes, so any id the per-device
  // tables hold is a device (multi-device code runs on one machine).
  int device_count() override { return kMaxDevicesPerKind; }

  std::string description() override {
    unsigned cores = std::thread::hardware_concurrency();
    return fmt::format("{} [{} core{}]", Device::cpu(0), cores, cores == 1 ? "" : "s");
  }

  std::unique_ptr<storage::Pool> make_pool(Device device) override { return storage::make_host_pool(device); }

  void run(engine::Fn& fn, engine::RunContext ctx) override { fn(ctx); }
  void drain() override {}

  void copy(void* dst, Device, const void* src, Device, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }

  void register_kernels() override { register_cpu_kernels(); }

  // Where oneDNN runs native 16-bit kernels (they take NHWC activations).
  bool prefers_channels_last(DType t) override { return cpu::channels_last_pays(t); }
};

}  // namespace

void register_cpu_device_backend() { register_device_backend(DeviceKind::kCPU, std::make_unique<CpuBackend>()); }

}  // namespace kiln
