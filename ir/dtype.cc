#include "ir/dtype.h"

#include <array>
#include <bit>
#include <cstring>

#include "ir/error.h"

namespace kiln {
namespace {

struct DTypeInfo {
  std::string_view name;
  std::string_view short_name;
  size_t size;
};

// Indexed by type flag.
constexpr std::array<DTypeInfo, kNumDTypeFlags> kInfo = {{
    {"float32", "f32", 4},
    {"float64", "f64", 8},
    {"float16", "f16", 2},
    {"uint8", "u8", 1},
    {"int32", "i32", 4},
    {"int8", "i8", 1},
    {"int64", "i64", 8},
    {"bool", "bool", 1},
    {"int16", "i16", 2},
    {"uint16", "u16", 2},
    {"uint32", "u32", 4},
    {"uint64", "u64", 8},
    {"bfloat16", "bf16", 2},
}};

const DTypeInfo& info(DType t) {
  auto i = static_cast<size_t>(t);
  KILN_ASSERT(i < kInfo.size());
  return kInfo[i];
}

}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }
std::string_view dtype_short_name(DType t) { return info(t).short_name; }

DType parse_dtype(std::string_view s) {
  for (size_t i = 0; i < kInfo.size(); ++i) {
    if (s == kInfo[i].name || s == kInfo[i].short_name) return static_cast<DType>(i);
  }
  if (s == "float") return DType::kFloat32;
  if (s == "double") return DType::kFloat64;
  if (s == "half") return DType::kFloat16;
  if (s == "int") return DType::kInt32;
  if (s == "bool_") return DType::kBool;
  throw TypeError(fmt::format("unknown dtype '{}' (expected one of float32, float64, float16, "
                              "bfloat16, uint8, int8, int32, int64, bool, ...)",
                              s));
}

DType dtype_from_flag(int flag) {
  KILN_CHECK(flag >= 0 && flag < kNumDTypeFlags, TypeError,
             "unknown dtype flag {} (MXNet type flags are 0..{})", flag, kNumDTypeFlags - 1);
  return static_cast<DType>(flag);
}

bool is_floating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBfloat16;
}

bool is_integral(DType t) { return !is_floating(t); }

float half_to_float(Half h) {
  uint32_t sign = (h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1f;
  uint32_t mant = h.bits & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  return std::bit_cast<float>(bits);
}

Half float_to_half(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return Half{static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u))};
  }
  if (abs >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow
  if (abs < 0x38800000u) {  // subnormal half or zero: round via float addition
    float v = std::bit_cast<float>(abs) + 0.5f;
    return Half{static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(v) - 0x3f000000u))};
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent and round to nearest even
  return Half{static_cast<uint16_t>(sign | (abs >> 13))};
}

float bf16_to_float(BFloat16 b) { return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16); }

BFloat16 float_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<uint16_t>((x >> 16) | 0x40u)};
  x += 0x7fffu + ((x >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(x >> 16)};
}

}  // namespace kiln
