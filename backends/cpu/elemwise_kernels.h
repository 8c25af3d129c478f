// Building blocks of the CPU elemwise kernels (backends/cpu/elemwise*.cc):
// element conversions, dtype dispatch over the elemwise dtypes, a broadcast
// iterator, and the generic binary and unary loops.
//
//   dispatch_numeric(x.dtype, [&](auto tag) {
//     using T = decltype(tag);
//     binary_kernel<T>(ctx, x, y, out, AddOp{});   // same-shape, scalar and broadcast paths
//   });
//
// Functors see elements in their compute type (`compute_t<T>`: float for
// float16/bfloat16, T otherwise) and return the output element in the same
// type. Loops are written so that GCC vectorizes them (`#pragma omp simd`);
// they stay correct when an output is exactly an input (in-place), and inputs
// that overlap an output any other way are copied first (`readable`).
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "backends/cpu/parallel.h"
#include "runtime/kernel.h"

namespace kiln::cpu {

// ---- element types

template <typename T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Half> {
  using type = float;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename ComputeType<T>::type;

template <typename T>
inline constexpr bool kIsHalfType = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Same results as ir/dtype.h's conversions (NaN payloads aside), but inline
// so that loops over bfloat16 vectorize and float16 uses F16C where present.
template <typename T>
inline compute_t<T> load(T v) {
  if constexpr (std::is_same_v<T, Half>) {
#if defined(__F16C__)
    return _cvtsh_ss(v.bits);
#else
    return half_to_float(v);
#endif
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return std::bit_cast<float>(static_cast<uint32_t>(v.bits) << 16);
  } else {
    return v;
  }
}

template <typename T>
inline T store(compute_t<T> v) {
  if constexpr (std::is_same_v<T, Half>) {
#if defined(__F16C__)
    return Half{_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT)};
#else
    return float_to_half(v);
#endif
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    uint32_t x = std::bit_cast<uint32_t>(v);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;  // to nearest even
    uint32_t quiet_nan = (x >> 16) | 0x40u;
    return BFloat16{static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
  } else {
    return v;
  }
}

// A double attribute (scalar, clip bound) as a T: integers truncate toward
// zero and saturate to T's range (NaN gives 0).
template <typename T>
T saturate_cast(double v) {
  if constexpr (std::is_integral_v<T>) {
    using L = std::numeric_limits<T>;
    if (std::isnan(v)) return T{0};
    if (v <= static_cast<double>(L::min())) return L::min();
    if (v >= static_cast<double>(L::max())) return L::max();
    return static_cast<T>(v);
  } else {
    return store<T>(static_cast<compute_t<T>>(v));
  }
}

// Integer arithmetic that wraps around instead of overflowing (signed
// overflow is undefined behaviour in C++).
template <typename C>
inline C wrap_add(C a, C b) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename C>
inline C wrap_sub(C a, C b) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename C>
inline C wrap_mul(C a, C b) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
}

// ---- dispatch over the dtypes of ir/ops/elemwise.h (inference has rejected the rest)

template <typename Fn>
decltype(auto) dispatch_floating(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32:
      return fn(float{});
    case DType::kFloat64:
      return fn(double{});
    case DType::kFloat16:
      return fn(Half{});
    case DType::kBfloat16:
      return fn(BFloat16{});
    default:
      break;
  }
  throw InternalError(fmt::format("internal error: elemwise kernel called with dtype {}", t));
}

template <typename Fn>
decltype(auto) dispatch_numeric(DType t, Fn&& fn) {
  switch (t) {
    case DType::kUint8:
      return fn(uint8_t{});
    case DType::kInt8:
      return fn(int8_t{});
    case DType::kInt32:
      return fn(int32_t{});
    case DType::kInt64:
      return fn(int64_t{});
    default:
      return dispatch_floating(t, std::forward<Fn>(fn));
  }
}

// ---- aliasing

// `in` unless it overlaps `out` other than element for element (an output
// that is exactly its input is fine for every loop here); then a copy of it,
// kept alive by `scratch`.
TensorView readable(const TensorView& in, const TensorView& out, std::unique_ptr<char[]>& scratch);

// ---- broadcasting

// The iteration space of an output and K inputs broadcast to it, with axes of
// size 1 dropped and adjacent axes merged wherever every operand allows it, so
// [N,C]+[C] is 2-D, [N,C]+[N,1] is 2-D and any same-shape case is 1-D. The
// innermost stride of every input is 0 (broadcast) or 1 (contiguous).
template <int K>
struct BroadcastPlan {
  int ndim = 0;
  std::array<int64_t, Shape::kMaxNdim> dims{};
  std::array<std::array<int64_t, Shape::kMaxNdim>, K> strides{};  // in elements

  BroadcastPlan(const Shape& out, const std::array<Shape, K>& in) {
    const int n = out.ndim();
    std::array<std::array<int64_t, Shape::kMaxNdim>, K> full{};
    for (int k = 0; k < K; ++k) {
      int64_t running = 1;
      for (int i = n - 1; i >= 0; --i) {
        int ik = i - (n - in[k].ndim());
        int64_t d = ik >= 0 ? in[k][ik] : 1;
        full[k][i] = d == 1 ? 0 : running;
        running *= d;
      }
    }
    for (int i = 0; i < n; ++i) {
      if (out[i] == 1) continue;
      bool merge = ndim > 0;
      for (int k = 0; k < K && merge; ++k) merge = strides[k][ndim - 1] == full[k][i] * out[i];
      if (!merge) {
        dims[ndim] = 1;
        ++ndim;
      }
      dims[ndim - 1] *= out[i];
      for (int k = 0; k < K; ++k) strides[k][ndim - 1] = full[k][i];
    }
    if (ndim == 0) {  // a single element
      ndim = 1;
      dims[0] = 1;
    }
  }

  bool inner_contiguous(int k) const { return strides[k][ndim - 1] != 0; }

  // Calls row(offsets, out_pos, len) for each run of the innermost axis
  // within the flat output range [begin, end); offsets[k] is input k's
  // element offset at out_pos.
  template <typename Row>
  void for_each_row(int64_t begin, int64_t end, Row&& row) const {
    const int last = ndim - 1;
    std::array<int64_t, Shape::kMaxNdim> idx{};
    std::array<int64_t, K> off{};
    int64_t rem = begin;
    for (int d = last; d >= 0; --d) {
      idx[d] = rem % dims[d];
      rem /= dims[d];
      for (int k = 0; k < K; ++k) off[k] += idx[d] * strides[k][d];
    }
    for (int64_t pos = begin; pos < end;) {
      int64_t len = std::min(dims[last] - idx[last], end - pos);
      row(off, pos, len);
      pos += len;
      for (int k = 0; k < K; ++k) off[k] -= idx[last] * strides[k][last];
      idx[last] = 0;
      for (int d = last - 1; d >= 0; --d) {
        for (int k = 0; k < K; ++k) off[k] += strides[k][d];
        if (++idx[d] < dims[d]) break;
        for (int k = 0; k < K; ++k) off[k] -= dims[d] * strides[k][d];
        idx[d] = 0;
      }
    }
  }
};

// ---- binary loops

// z[i] = op(x[i or 0], y[i or 0]) for i < n.
template <bool kXContiguous, bool kYContiguous, typename T, typename Op>
inline void binary_span(const T* x, const T* y, T* z, int64_t n, const Op& op) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) z[i] = store<T>(op(load(x[kXContiguous ? i : 0]), load(y[kYContiguous ? i : 0])));
}

// out = op(a, b) with NumPy broadcasting (out.shape is the broadcast shape).
template <typename T, typename Op>
void binary_kernel(const KernelContext& ctx, TensorView a, TensorView b, const TensorView& out, const Op& op) {
  const int64_t n = out.size();
  if (n == 0) return;
  std::unique_ptr<char[]> scratch_a, scratch_b;
  a = readable(a, out, scratch_a);
  b = readable(b, out, scratch_b);
  const T* pa = a.ptr<const T>();
  const T* pb = b.ptr<const T>();
  T* po = out.ptr<T>();
  const int threads = ctx.run.num_threads;
  if (a.size() == n && b.size() == n) {
    parallel_for(threads, n, [&](int64_t s, int64_t e) { binary_span<true, true>(pa + s, pb + s, po + s, e - s, op); });
  } else if (a.size() == n && b.size() == 1) {
    parallel_for(threads, n, [&](int64_t s, int64_t e) { binary_span<true, false>(pa + s, pb, po + s, e - s, op); });
  } else if (a.size() == 1 && b.size() == n) {
    parallel_for(threads, n, [&](int64_t s, int64_t e) { binary_span<false, true>(pa, pb + s, po + s, e - s, op); });
  } else {
    const BroadcastPlan<2> plan(out.shape, {a.shape, b.shape});
    const bool ca = plan.inner_contiguous(0), cb = plan.inner_contiguous(1);
    parallel_for(threads, n, [&](int64_t s, int64_t e) {
      plan.for_each_row(s, e, [&](const std::array<int64_t, 2>& off, int64_t pos, int64_t len) {
        const T* x = pa + off[0];
        const T* y = pb + off[1];
        if (ca && cb)
          binary_span<true, true>(x, y, po + pos, len, op);
        else if (ca)
          binary_span<true, false>(x, y, po + pos, len, op);
        else if (cb)
          binary_span<false, true>(x, y, po + pos, len, op);
        else
          binary_span<false, false>(x, y, po + pos, len, op);
      });
    });
  }
}

}  // namespace kiln::cpu
