// Device: where an array lives and where its operations run.
//
//   Device::cpu(1).to_string() == "cpu(1)";  parse_device("cuda:0") == Device::cuda(0)
//
// Every cpu(i) is a separate device with its own engine lanes, so multi-device
// code runs (and is tested) on a machine without GPUs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace kiln {

enum class DeviceKind : int8_t { kCPU = 1, kCUDA = 2 };  // MXNet's dev_type numbers
inline constexpr int kNumDeviceKinds = 3;

struct Device {
  DeviceKind kind = DeviceKind::kCPU;
  int id = 0;

  static constexpr Device cpu(int id = 0) { return {DeviceKind::kCPU, id}; }
  static constexpr Device cuda(int id = 0) { return {DeviceKind::kCUDA, id}; }

  bool is_cpu() const { return kind == DeviceKind::kCPU; }
  bool is_cuda() const { return kind == DeviceKind::kCUDA; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;  // "cpu(0)", "cuda(1)"
};

inline constexpr int kMaxDevicesPerKind = 64;

// Parses "cpu", "cpu:1", "cpu(1)", "gpu:0", "cuda(0)". Throws DeviceError.
Device parse_device(std::string_view s);

// "cpu", "cuda"; "unknown" for a value outside the enum.
std::string_view device_kind_name(DeviceKind kind);

// Throws DeviceError when `d` cannot be used in this process (id out of range,
// no backend for its kind, or no such device). Defined with the device
// backends (runtime/device_backend.cc), which know how many devices exist.
void check_device(Device d);

}  // namespace kiln

template <>
struct std::hash<kiln::Device> {
  size_t operator()(const kiln::Device& d) const noexcept {
    return static_cast<size_t>(d.kind) * 1000003u + static_cast<size_t>(d.id);
  }
};

template <>
struct fmt::formatter<kiln::Device> : fmt::formatter<std::string> {
  auto format(const kiln::Device& d, format_context& ctx) const {
    return fmt::formatter<std::string>::format(d.to_string(), ctx);
  }
};
