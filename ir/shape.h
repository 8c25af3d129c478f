// Shape: the dimensions of an array, stored inline (no heap allocation).
//
//   Shape s{2, 3};  s.ndim() == 2;  s.size() == 6;  s[1] == 3;  fmt::format("{}", s) == "[2,3]"
//
// A scalar has ndim 0 and size 1. Dimensions are >= 0; constructing a Shape
// with a negative dimension or more than kMaxNdim axes throws ShapeError.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace kiln {

class Shape {
 public:
  static constexpr int kMaxNdim = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims) : Shape(std::span<const int64_t>(dims)) {}

  int ndim() const { return ndim_; }
  int64_t size() const;  // product of dims; 1 for a scalar
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + ndim_; }
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(ndim_)}; }
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }

  void push_back(int64_t d);
  // Row-major strides in elements.
  std::array<int64_t, kMaxNdim> strides() const;

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

  std::string to_string() const;  // "[2,3]"
  std::string to_mxnet_string() const;  // "(2, 3)", as MXNet attribute strings

 private:
  std::array<int64_t, kMaxNdim> dims_{};
  int ndim_ = 0;
};

// Normalizes `axis` (negative counts from the end) for an array of `ndim`
// axes; throws IndexError naming `what` (e.g. "sum") when out of range.
int normalize_axis(int axis, int ndim, std::string_view what);

// NumPy broadcasting of two shapes; throws ShapeError naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

// Parses MXNet's "(2, 3)" / "[2,3]" / "2" form (None dims are rejected).
Shape parse_shape(std::string_view s);

}  // namespace kiln

template <>
struct fmt::formatter<kiln::Shape> : fmt::formatter<std::string> {
  auto format(const kiln::Shape& s, format_context& ctx) const {
    return fmt::formatter<std::string>::format(s.to_string(), ctx);
  }
};
