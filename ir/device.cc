#include "ir/device.h"

#include <charconv>

#include "ir/error.h"

namespace kiln {

std::string Device::to_string() const {
  return fmt::format("{}({})", kind == DeviceKind::kCPU ? "cpu" : "cuda", id);
}

Device parse_device(std::string_view s) {
  std::string_view name = s, num;
  if (auto p = s.find_first_of(":("); p != std::string_view::npos) {
    name = s.substr(0, p);
    num = s.substr(p + 1);
    if (s[p] == '(') {
      KILN_CHECK(!num.empty() && num.back() == ')', DeviceError, "cannot parse device '{}'", s);
      num.remove_suffix(1);
    }
  }
  DeviceKind kind;
  if (name == "cpu") {
    kind = DeviceKind::kCPU;
  } else if (name == "gpu" || name == "cuda") {
    kind = DeviceKind::kCUDA;
  } else {
    throw DeviceError(fmt::format("unknown device '{}' (expected cpu:N or cuda:N)", s));
  }
  int id = 0;
  if (!num.empty()) {
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), id);
    KILN_CHECK(ec == std::errc() && p == num.data() + num.size(), DeviceError,
               "cannot parse device id in '{}'", s);
  }
  Device d{kind, id};
  check_device(d);
  return d;
}


void check_device(Device d) {
  KILN_CHECK(d.id >= 0 && d.id < kMaxDevicesPerKind, DeviceError,
             "device {}: id out of range (expected 0..{})", d, kMaxDevicesPerKind - 1);
  if (d.is_cuda()) {
    int n = cuda_device_count();
    KILN_CHECK(d.id < n, DeviceError, "device {} requested, but this process sees {} CUDA device(s){}", d,
               n, n == 0 ? " (Kiln was built without CUDA or no GPU is present)" : "");
  }
}

}  // namespace kiln
