#include "ir/device.h"

#include <charconv>

#include "ir/error.h"

namespace kiln {

std::string_view device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCPU: return "cpu";
    case DeviceKind::kCUDA: return "cuda";
  }
  return "unknown";
}

std::string Device::to_string() const { return fmt::format("{}({})", device_kind_name(kind), id); }

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


}  // namespace kiln
