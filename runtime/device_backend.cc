// The backend registry, and the device checks and copies that go through it.
#include "runtime/device_backend.h"

#include <array>
#include <atomic>
#include <mutex>

#include "ir/error.h"

namespace kiln {

namespace {

using Slots = std::array<std::atomic<DeviceBackend*>, kNumDeviceKinds>;

// Leaked with the backends they hold: operations still finishing during exit
// run, drain and copy through them.
Slots& slots() {
  static Slots& s = *new Slots{};
  return s;
}

bool valid_kind(DeviceKind kind) {
  auto k = static_cast<int>(kind);
  return k >= 0 && k < kNumDeviceKinds;
}

// Once initialization has returned the slots no longer change, except by a
// test registering a kind that had none; hence acquire loads.
DeviceBackend* slot(DeviceKind kind) {
  init_device_backends();
  return valid_kind(kind) ? slots()[static_cast<size_t>(kind)].load(std::memory_order_acquire) : nullptr;
}

template <typename F>
void for_each_backend(F f) {
  init_device_backends();
  for (std::atomic<DeviceBackend*>& s : slots())
    if (DeviceBackend* b = s.load(std::memory_order_acquire)) f(*b);
}

[[noreturn]] void throw_no_backend(DeviceKind kind) {
  throw DeviceError(fmt::format("no backend for {} devices: Kiln was built without it", device_kind_name(kind)));
}

}  // namespace

void register_device_backend(DeviceKind kind, std::unique_ptr<DeviceBackend> backend) {
  KILN_ASSERT(valid_kind(kind) && backend);
  DeviceBackend* expected = nullptr;
  bool fresh =
      slots()[static_cast<size_t>(kind)].compare_exchange_strong(expected, backend.get(), std::memory_order_acq_rel);
  KILN_ASSERT(fresh);
  (void)backend.release();
}

void init_device_backends() {
  // A function-local static rather than registration from static
  // initializers: the order is explicit and the first lookup, from any
  // translation unit or thread, finds every backend registered.
  static const bool done = (register_builtin_device_backends(), true);
  (void)done;
}

DeviceBackend& device_backend(DeviceKind kind) {
  if (DeviceBackend* b = slot(kind)) return *b;
  throw_no_backend(kind);
}

DeviceBackend* find_device_backend(DeviceKind kind) { return slot(kind); }

int device_count(DeviceKind kind) {
  DeviceBackend* b = slot(kind);
  return b ? b->device_count() : 0;
}

void drain_device_backends() {
  for_each_backend([](DeviceBackend& b) { b.drain(); });
}

void register_device_kernels() {
  for_each_backend([](DeviceBackend& b) { b.register_kernels(); });
}

void copy_bytes(void* dst, Device to, const void* src, Device from, size_t bytes) {
  // Devices of one kind copy through their backend; the host and a device
  // through the device's.
  if (from.kind != to.kind && !from.is_cpu() && !to.is_cpu()) {
    throw DeviceError(fmt::format("copy from {} to {}: no backend copies between {} and {} devices", from, to,
                                  device_kind_name(from.kind), device_kind_name(to.kind)));
  }
  device_backend(from.is_cpu() ? to.kind : from.kind).copy(dst, to, src, from, bytes);
}

void check_device(Device d) {
  KILN_CHECK(d.id >= 0 && d.id < kMaxDevicesPerKind, DeviceError, "device {}: id out of range (expected 0..{})", d,
             kMaxDevicesPerKind - 1);
  DeviceBackend* b = slot(d.kind);
  KILN_CHECK(b, DeviceError, "device {} requested, but there is no backend for {} devices: Kiln was built without it",
             d, device_kind_name(d.kind));
  int n = b->device_count();
  KILN_CHECK(d.id < n, DeviceError, "device {} requested, but this process sees {} {} device(s){}", d, n,
             device_kind_name(d.kind), n == 0 ? " (none is present)" : "");
}

}  // namespace kiln
