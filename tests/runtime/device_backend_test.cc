// The device-backend interface (runtime/device_backend.h) on the CPU backend,
// which every build has, and the registry's answers for kinds without one.
#include "runtime/device_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "ir/error.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

TEST(DeviceBackend, DiscoversCpuDevices) {
  DeviceBackend& cpu = device_backend(DeviceKind::kCPU);
  EXPECT_EQ(&cpu, find_device_backend(DeviceKind::kCPU));
  // Every cpu(i) the engine's tables hold is a device.
  EXPECT_EQ(cpu.device_count(), kMaxDevicesPerKind);
  EXPECT_EQ(device_count(DeviceKind::kCPU), kMaxDevicesPerKind);
  EXPECT_CONTAINS(cpu.description(), "cpu(0) [");
  check_device(Device::cpu(kMaxDevicesPerKind - 1));
  EXPECT_THROW(check_device(Device::cpu(kMaxDevicesPerKind)), DeviceError);
}

TEST(DeviceBackend, MakesAPool) {
  std::unique_ptr<storage::Pool> pool = device_backend(DeviceKind::kCPU).make_pool(Device::cpu(11));
  storage::Block b = pool->alloc(100);
  ASSERT_NE(b.ptr, nullptr);
  EXPECT_EQ(b.device, Device::cpu(11));
  std::memset(b.ptr, 7, 100);
  EXPECT_EQ(pool->stats().in_use, static_cast<int64_t>(b.size));
  pool->free(b);
  EXPECT_EQ(pool->stats().in_use, 0);
  // storage::pool asks the same backend once per device and keeps the result.
  EXPECT_EQ(&storage::pool(Device::cpu(12)), &storage::pool(Device::cpu(12)));
}

TEST(DeviceBackend, RunsAnOpOnALaneAndDrains) {
  DeviceBackend& cpu = device_backend(DeviceKind::kCPU);
  int seen = 0;
  engine::Fn fn = [&](engine::RunContext ctx) { seen = ctx.device.id + 1; };
  cpu.run(fn, {.device = Device::cpu(3)});
  EXPECT_EQ(seen, 4);  // CPU operations finish inside run()

  // Through the engine: the op runs on cpu(3)'s lane, and draining the kind
  // after the wait leaves nothing queued.
  engine::Engine& e = engine::get();
  engine::Var* v = e.new_var();
  std::atomic<int> ran{0};
  e.push([&](engine::RunContext ctx) { ran = ctx.device.id; }, {}, {v}, {.device = Device::cpu(3), .name = "probe"});
  e.wait_for_var(v);
  engine::drain_device(Device::cpu(3));
  drain_device_backends();
  EXPECT_EQ(ran.load(), 3);
  e.delete_var(v);
}

TEST(DeviceBackend, CopiesBetweenCpuDevices) {
  const Device from = Device::cpu(1), to = Device::cpu(2);
  EXPECT_EQ(copy_lane_device(from, to), to);
  std::vector<float> src(1000), dst(1000, 0.f);
  std::iota(src.begin(), src.end(), 0.f);
  engine::Engine& e = engine::get();
  engine::Var* a = e.new_var();
  engine::Var* b = e.new_var();
  e.push([&](engine::RunContext) { copy_bytes(dst.data(), to, src.data(), from, src.size() * sizeof(float)); }, {a},
         {b}, {.device = copy_lane_device(from, to), .lane = engine::Lane::kCopy, .name = "copy"});
  e.wait_for_var(b);
  EXPECT_EQ(dst, src);
  e.delete_var(a);
  e.delete_var(b);
}

TEST(DeviceBackend, CopyLaneIsTheDevicesLane) {
  // A copy that involves a non-host device runs on that device's lane.
  const Device host = Device::cpu(0), gpu = Device::cuda(1);
  EXPECT_EQ(copy_lane_device(host, gpu), gpu);
  EXPECT_EQ(copy_lane_device(gpu, host), gpu);
  EXPECT_EQ(copy_lane_device(Device::cuda(0), gpu), gpu);
}

TEST(DeviceBackend, CudaWithoutABackendIsAClearError) {
  if (find_device_backend(DeviceKind::kCUDA)) GTEST_SKIP() << "built with CUDA: the CUDA backend is registered";
  EXPECT_EQ(device_count(DeviceKind::kCUDA), 0);
  std::string msg = test::error_of<DeviceError>([] { (void)device_backend(DeviceKind::kCUDA); });
  EXPECT_CONTAINS(msg, "no backend for cuda devices");
  msg = test::error_of<DeviceError>([] { check_device(Device::cuda(0)); });
  EXPECT_CONTAINS(msg, "cuda(0)");
  EXPECT_CONTAINS(msg, "no backend for cuda devices");
}

// A backend for a kind no build registers (the slot below kCPU): it counts
// what the registry routes to it.
class FakeBackend final : public DeviceBackend {
 public:
  int device_count() override { return 2; }
  std::string description() override { return "fake(0), fake(1)"; }
  std::unique_ptr<storage::Pool> make_pool(Device device) override { return storage::make_host_pool(device); }
  void run(engine::Fn& fn, engine::RunContext ctx) override {
    ++runs;
    fn(ctx);
  }
  void drain() override { ++drains; }
  void copy(void* dst, Device, const void* src, Device, size_t bytes) override {
    ++copies;
    std::memcpy(dst, src, bytes);
  }
  void register_kernels() override {}

  int runs = 0, drains = 0, copies = 0;
};

TEST(DeviceBackend, UnregisteredKindThenARegisteredOne) {
  const auto kind = static_cast<DeviceKind>(0);
  ASSERT_EQ(find_device_backend(kind), nullptr);
  std::string msg = test::error_of<DeviceError>([&] { (void)device_backend(kind); });
  EXPECT_CONTAINS(msg, "no backend for unknown devices");
  EXPECT_EQ(device_count(kind), 0);

  auto owned = std::make_unique<FakeBackend>();
  FakeBackend* fake = owned.get();
  register_device_backend(kind, std::move(owned));
  EXPECT_EQ(&device_backend(kind), fake);
  EXPECT_EQ(device_count(kind), 2);
  check_device(Device{kind, 1});
  EXPECT_THROW(check_device(Device{kind, 2}), DeviceError);

  // Copies between the host and the fake kind go through the fake backend.
  int x = 42, y = 0;
  copy_bytes(&y, Device{kind, 0}, &x, Device::cpu(0), sizeof x);
  EXPECT_EQ(y, 42);
  EXPECT_EQ(fake->copies, 1);
  drain_device_backends();
  EXPECT_EQ(fake->drains, 1);
  // Registering a kind twice is an internal error.
  EXPECT_THROW(register_device_backend(kind, std::make_unique<FakeBackend>()), InternalError);
}

}  // namespace
}  // namespace kiln
