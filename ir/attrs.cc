#include "ir/attrs.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace kiln {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\'' || s.front() == '"')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\'' || s.back() == '"')) s.remove_suffix(1);
  return s;
}

template <typename I>
I parse_int(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.back() == 'L') s.remove_suffix(1);  // Python 2 longs in old JSON
  I v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  KILN_CHECK(ec == std::errc() && p == s.data() + s.size(), ValueError, "expected an integer, found '{}'", s);
  return v;
}

}  // namespace

bool parse_attr(std::string_view s, bool*) {
  s = trim(s);
  if (s == "True" || s == "true" || s == "1") return true;
  if (s == "False" || s == "false" || s == "0") return false;
  throw ValueError(fmt::format("expected True or False, found '{}'", s));
}

int parse_attr(std::string_view s, int*) { return parse_int<int>(s); }
int64_t parse_attr(std::string_view s, int64_t*) { return parse_int<int64_t>(s); }

double parse_attr(std::string_view s, double*) {
  s = trim(s);
  if (s == "inf" || s == "Infinity") return std::numeric_limits<double>::infinity();
  if (s == "-inf" || s == "-Infinity") return -std::numeric_limits<double>::infinity();
  if (s == "nan" || s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  KILN_CHECK(ec == std::errc() && p == s.data() + s.size(), ValueError, "expected a number, found '{}'", s);
  return v;
}

float parse_attr(std::string_view s, float*) { return static_cast<float>(parse_attr(s, static_cast<double*>(nullptr))); }
std::string parse_attr(std::string_view s, std::string*) { return std::string(trim(s)); }
DType parse_attr(std::string_view s, DType*) { return parse_dtype(trim(s)); }
Shape parse_attr(std::string_view s, Shape*) { return parse_shape(s); }

IntTuple parse_attr(std::string_view s, IntTuple*) {
  IntTuple out;
  size_t i = 0;
  auto is_sep = [](char c) { return c == ' ' || c == '(' || c == ')' || c == '[' || c == ']' || c == ',' || c == 'L'; };
  while (i < s.size()) {
    while (i < s.size() && is_sep(s[i])) ++i;
    if (i == s.size()) break;
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
    KILN_CHECK(ec == std::errc(), ValueError, "expected a tuple of integers, found '{}'", s);
    out.push_back(v);
    i = static_cast<size_t>(p - s.data());
  }
  return out;
}

std::string print_attr(bool v) { return v ? "True" : "False"; }
std::string print_attr(int v) { return std::to_string(v); }
std::string print_attr(int64_t v) { return std::to_string(v); }

std::string print_attr(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, p);
}

std::string print_attr(float v) {
  if (std::isinf(v) || std::isnan(v)) return print_attr(static_cast<double>(v));
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that round-trips as float
  return std::string(buf, p);
}
std::string print_attr(const std::string& v) { return v; }
std::string print_attr(DType v) { return std::string(dtype_name(v)); }
std::string print_attr(const Shape& v) { return v.to_mxnet_string(); }

std::string print_attr(const IntTuple& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  if (v.size() == 1) s += ",";
  return s + ")";
}

bool OpAttrs::operator==(const OpAttrs& o) const {
  if (holder_ == o.holder_) return true;
  if (!holder_ || !o.holder_) return false;
  return holder_->type() == o.holder_->type() && holder_->to_strings() == o.holder_->to_strings();
}

namespace detail {

bool is_ignorable_attr_key(std::string_view key) {
  return (key.size() > 4 && key.substr(0, 2) == "__" && key.substr(key.size() - 2) == "__") ||
         key == "ctx_group" || key == "lr_mult" || key == "wd_mult" || key == "force_mirroring" ||
         key == "mirror_stage";
}

}  // namespace detail
}  // namespace kiln
