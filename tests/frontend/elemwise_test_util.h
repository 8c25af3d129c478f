// Helpers shared by the elemwise tests: host data in any dtype, a NumPy-style
// broadcasting reference, and an element-by-element comparison that prints a
// one-line reproduction of the first mismatch.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "frontend/invoke.h"
#include "frontend/nd.h"

namespace kiln::testing {

inline const Device kDevices[] = {Device::cpu(0), Device::cpu(1)};

// An array holding `values` (converted to `dtype`) on `device`.
inline NDArray make_array(const std::vector<double>& values, const Shape& shape, DType dtype,
                          Device device = Device::cpu(0)) {
  auto as = [&](auto tag) {
    using T = decltype(tag);
    return nd::array(std::vector<T>(values.begin(), values.end()), shape, device);
  };
  switch (dtype) {
    case DType::kFloat32:
      return as(float{});
    case DType::kFloat64:
      return as(double{});
    case DType::kInt32:
      return as(int32_t{});
    case DType::kInt64:
      return as(int64_t{});
    case DType::kUint8:
      return as(uint8_t{});
    case DType::kInt8:
      return as(int8_t{});
    default:
      return nd::cast(as(double{}), dtype);  // halves, bool: through Cast
  }
}

// `n` values from `dist`, rounded to multiples of `step` when step > 0 (exact
// in every dtype under test, and with ties for the comparisons).
template <typename Dist>
std::vector<double> random_values(int64_t n, Dist dist, double step = 0, uint32_t seed = 1) {
  std::mt19937 gen(seed);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) {
    x = dist(gen);
    if (step > 0) x = std::round(x / step) * step;
  }
  return v;
}

inline std::vector<double> uniform_values(int64_t n, double lo, double hi, double step = 0, uint32_t seed = 1) {
  return random_values(n, std::uniform_real_distribution<double>(lo, hi), step, seed);
}

// The flat index into an input of shape `in` that broadcasts to element
// `flat` of `out`.
inline int64_t broadcast_index(const Shape& in, const Shape& out, int64_t flat) {
  int64_t index = 0, stride = 1;
  for (int i = out.ndim() - 1; i >= 0; --i) {
    int64_t coord = flat % out[i];
    flat /= out[i];
    int ii = i - (out.ndim() - in.ndim());
    if (ii < 0) continue;
    if (in[ii] != 1) index += coord * stride;
    stride *= in[ii];
  }
  return index;
}

// NumPy's broadcast shape, written independently of kiln::broadcast_shapes.
inline Shape reference_broadcast_shape(const Shape& a, const Shape& b) {
  int n = std::max(a.ndim(), b.ndim());
  std::vector<int64_t> dims(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    int ia = i - (n - a.ndim()), ib = i - (n - b.ndim());
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    dims[static_cast<size_t>(i)] = da == 1 ? db : da;
  }
  return Shape(dims);
}

inline std::vector<double> reference_binary(const std::vector<double>& a, const Shape& sa, const std::vector<double>& b,
                                            const Shape& sb, const std::function<double(double, double)>& f) {
  Shape out = reference_broadcast_shape(sa, sb);
  std::vector<double> r(static_cast<size_t>(out.size()));
  if (sa == sb) {
    for (size_t i = 0; i < r.size(); ++i) r[i] = f(a[i], b[i]);
    return r;
  }
  for (int64_t i = 0; i < out.size(); ++i)
    r[static_cast<size_t>(i)] =
        f(a[static_cast<size_t>(broadcast_index(sa, out, i))], b[static_cast<size_t>(broadcast_index(sb, out, i))]);
  return r;
}

// Expects got[i] == want[i] within rtol * max(1, |want|) (NaN matches NaN).
inline void expect_all_near(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                            const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    bool ok = (std::isnan(g) && std::isnan(w)) || g == w || std::fabs(g - w) <= rtol * std::max(1.0, std::fabs(w));
    if (!ok) {
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << w;
      return;
    }
  }
}

// Tolerance for results computed in `dtype` against a double reference.
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 2e-6;
    case DType::kFloat64:
      return 1e-12;
    case DType::kFloat16:
      return 2e-3;
    case DType::kBfloat16:
      return 1.6e-2;
    default:
      return 0;
  }
}

// An exact integer result reduced into `dtype`'s range the way the kernels
// wrap around (modulo 2^bits); other dtypes unchanged.
inline double wrap_to(DType dtype, double v) {
  if (!is_integral(dtype) || std::isnan(v) || std::isinf(v)) return v;
  double m = std::ldexp(1.0, static_cast<int>(dtype_size(dtype)) * 8);
  bool is_signed = dtype == DType::kInt8 || dtype == DType::kInt32 || dtype == DType::kInt64;
  double lo = is_signed ? -m / 2 : 0;
  if (v >= lo && v < lo + m) return v;  // (also keeps int64 values exact)
  double r = std::fmod(v - lo, m);
  if (r < 0) r += m;
  return r + lo;
}

inline std::string describe(std::string_view op, DType t, const Shape& a, const Shape& b, Device d) {
  return fmt::format("{}({}{}, {}{}) on {}", op, dtype_short_name(t), a, dtype_short_name(t), b, d);
}

}  // namespace kiln::testing
