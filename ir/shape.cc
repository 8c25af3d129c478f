#include "ir/shape.h"

#include <charconv>

#include "ir/error.h"

namespace kiln {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  KILN_CHECK(dims.size() <= static_cast<size_t>(kMaxNdim), ShapeError,
             "shape has {} axes; Kiln supports at most {}", dims.size(), kMaxNdim);
  for (int64_t d : dims) push_back(d);
}

int64_t Shape::size() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

void Shape::push_back(int64_t d) {
  KILN_CHECK(ndim_ < kMaxNdim, ShapeError, "shape {} cannot grow past {} axes", to_string(), kMaxNdim);
  KILN_CHECK(d >= 0, ShapeError, "negative dimension {} in shape {} (axis {})", d, to_string(), ndim_);
  // The product of the non-zero dims must fit in int64_t, so that size() and
  // strides() never overflow, even with a zero after huge dims.
  int64_t n = d == 0 ? 1 : d;
  for (int i = 0; i < ndim_; ++i) {
    KILN_CHECK(dims_[i] == 0 || !__builtin_mul_overflow(n, dims_[i], &n), ShapeError,
               "dimension {} after shape {} (axis {}): more than 2^63 - 1 elements", d, to_string(), ndim_);
  }
  dims_[ndim_++] = d;
}

std::array<int64_t, Shape::kMaxNdim> Shape::strides() const {
  std::array<int64_t, kMaxNdim> s{};
  int64_t acc = 1;
  for (int i = ndim_ - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= dims_[i];
  }
  return s;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i) s += ',';
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

std::string Shape::to_mxnet_string() const {
  std::string s = "(";
  for (int i = 0; i < ndim_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  if (ndim_ == 1) s += ",";
  return s + ")";
}

int normalize_axis(int axis, int ndim, std::string_view what) {
  KILN_CHECK(axis >= -ndim && axis < ndim, IndexError,
             "{}: axis {} is out of range for an array with {} axes (expected {}..{})", what, axis, ndim,
             -ndim, ndim - 1);
  return axis < 0 ? axis + ndim : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  int n = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    int ia = i - (n - a.ndim()), ib = i - (n - b.ndim());
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    KILN_CHECK(da == db || da == 1 || db == 1, ShapeError,
               "{}: shapes {} and {} cannot be broadcast together (axis {}: {} vs {})", op, a, b, i, da, db);
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

Shape parse_shape(std::string_view s) {
  Shape out;
  size_t i = 0;
  auto skip = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '(' || s[i] == ')' || s[i] == '[' || s[i] == ']' ||
                            s[i] == ',' || s[i] == 'L'))
      ++i;
  };
  skip();
  while (i < s.size()) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
    KILN_CHECK(ec == std::errc(), ValueError, "cannot parse shape '{}' at character {}", s, i);
    out.push_back(v);
    i = static_cast<size_t>(p - s.data());
    skip();
  }
  return out;
}

}  // namespace kiln
