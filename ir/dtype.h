// Element types, numbered as MXNet's type flags (mshadow::TypeFlag).
//
//   DType t = DType::kFloat32;  dtype_size(t) == 4;  dtype_name(t) == "float32"
//
// The numbers reach disk in params files: append only, never renumber.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace kiln {

enum class DType : int8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kUint8 = 3,
  kInt32 = 4,
  kInt8 = 5,
  kInt64 = 6,
  kBool = 7,
  kInt16 = 8,
  kUint16 = 9,
  kUint32 = 10,
  kUint64 = 11,
  kBfloat16 = 12,
};

inline constexpr int kNumDTypeFlags = 13;

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "float32", "bfloat16", ...
// Short form used in shape errors and the IR text: "f32", "bf16", "i64".
std::string_view dtype_short_name(DType t);
// Parses "float32" (also numpy spellings "float", "int", "bool_" and short names).
// Throws TypeError naming the string.
DType parse_dtype(std::string_view s);
// Throws TypeError for flags that are not a DType (params files, JSON).
DType dtype_from_flag(int flag);

bool is_floating(DType t);  // f16, bf16, f32, f64
bool is_integral(DType t);  // every integer type and bool

// IEEE half and bfloat16 storage types; arithmetic goes through float.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
float half_to_float(Half h);
Half float_to_half(float f);
float bf16_to_float(BFloat16 b);
BFloat16 float_to_bf16(float f);  // round to nearest even

// Calls `fn(T{})` with the C++ type that stores `t` (bool as bool, halves as
// Half/BFloat16).
template <typename Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn);

}  // namespace kiln

template <>
struct fmt::formatter<kiln::DType> : fmt::formatter<std::string_view> {
  auto format(kiln::DType t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(kiln::dtype_name(t), ctx);
  }
};

#include "ir/dtype_dispatch.h"
