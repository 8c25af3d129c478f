// NumPy-like printing of NDArrays, followed by MXNet's "<NDArray 2x3 @cpu(0)>" line.
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "frontend/ndarray.h"

namespace kiln {
namespace {

constexpr int64_t kSummarizeAbove = 1000;  // elements, as NumPy's threshold
constexpr int64_t kEdgeItems = 3;

std::string format_value(double v, DType dtype, bool all_integral) {
  if (dtype == DType::kBool) return v != 0 ? "True" : "False";
  if (is_integral(dtype)) return fmt::format("{}", static_cast<int64_t>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (all_integral && std::fabs(v) < 1e16) return fmt::format("{}.", static_cast<int64_t>(v));
  return fmt::format("{:.8g}", v);
}

struct Printer {
  const std::vector<double>& values;
  const Shape& shape;
  DType dtype;
  bool summarize;
  bool all_integral;
  size_t width = 0;

  std::vector<int64_t> shown(int axis) const {
    std::vector<int64_t> idx;
    int64_t n = shape[axis];
    if (summarize && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
      idx.push_back(-1);  // "..."
      for (int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
    } else {
      for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    }
    return idx;
  }

  void measure(int axis, int64_t offset) {
    auto strides = shape.strides();
    for (int64_t i : shown(axis)) {
      if (i < 0) continue;
      if (axis + 1 == shape.ndim()) {
        width = std::max(width, format_value(values[offset + i], dtype, all_integral).size());
      } else {
        measure(axis + 1, offset + i * strides[axis]);
      }
    }
  }

  void print(std::string& out, int axis, int64_t offset) const {
    auto strides = shape.strides();
    out += '[';
    auto idx = shown(axis);
    for (size_t k = 0; k < idx.size(); ++k) {
      int64_t i = idx[k];
      if (axis + 1 == shape.ndim()) {
        if (k) out += ' ';
        if (i < 0) {
          out += "...";
        } else {
          std::string s = format_value(values[offset + i], dtype, all_integral);
          out += std::string(width - s.size(), ' ') + s;
        }
      } else {
        if (k) {
          out += std::string(static_cast<size_t>(shape.ndim() - axis - 1), '\n');
          out += std::string(static_cast<size_t>(axis + 1), ' ');
        }
        if (i < 0) {
          out += "...";
        } else {
          print(out, axis + 1, offset + i * strides[axis]);
        }
      }
    }
    out += ']';
  }
};

}  // namespace

std::string NDArray::to_string() const {
  if (is_none()) return "<NDArray none>";
  check_readable("printing an array");
  std::vector<double> values = to_vector<double>();
  std::string out;
  if (shape_.ndim() == 0) {
    out = format_value(values[0], dtype_, std::floor(values[0]) == values[0]);
  } else {
    bool all_integral = true;
    for (double v : values) all_integral = all_integral && std::isfinite(v) && std::floor(v) == v;
    Printer p{values, shape_, dtype_, size() > kSummarizeAbove, all_integral};
    if (size() > 0) p.measure(0, 0);
    p.print(out, 0, 0);
  }
  std::string dims;
  for (int i = 0; i < ndim(); ++i) dims += (i ? "x" : "") + std::to_string(shape_[i]);
  out += fmt::format("\n<NDArray {}{} @{}>", dims.empty() ? "scalar" : dims,
                     dtype_ == DType::kFloat32 ? "" : " " + std::string(dtype_name(dtype_)), device());
  return out;
}

std::ostream& operator<<(std::ostream& os, const NDArray& a) { return os << a.to_string(); }

}  // namespace kiln
