// Implementation of kiln::dispatch_dtype (included by ir/dtype.h).
#pragma once

#include "ir/error.h"

namespace kiln {

template <typename Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32: return fn(float{});
    case DType::kFloat64: return fn(double{});
    case DType::kFloat16: return fn(Half{});
    case DType::kBfloat16: return fn(BFloat16{});
    case DType::kUint8: return fn(uint8_t{});
    case DType::kInt8: return fn(int8_t{});
    case DType::kInt16: return fn(int16_t{});
    case DType::kUint16: return fn(uint16_t{});
    case DType::kInt32: return fn(int32_t{});
    case DType::kUint32: return fn(uint32_t{});
    case DType::kInt64: return fn(int64_t{});
    case DType::kUint64: return fn(uint64_t{});
    case DType::kBool: return fn(bool{});
  }
  throw InternalError(fmt::format("internal error: dtype flag {} has no C++ type", static_cast<int>(t)));
}

}  // namespace kiln
