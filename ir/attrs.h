// Typed operator attributes that parse from and print to MXNet's string form.
//
// Each op with attributes declares a plain struct with defaults and a
// `fields` visitor naming each field as MXNet spells it:
//
//   struct ClipAttrs {
//     double a_min = 0, a_max = 0;
//     template <typename V> void fields(V& v) { v("a_min", a_min, kRequired); v("a_max", a_max, kRequired); }
//   };
//
// `OpAttrs` holds one such struct behind a shared, immutable, type-erased
// pointer: cheap to copy, hashable, comparable, printable as MXNet's
// {"a_min": "0", "a_max": "6"} map. Kernels read it with `attrs.as<ClipAttrs>()`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "ir/dtype.h"
#include "ir/error.h"
#include "ir/shape.h"

namespace kiln {

using AttrMap = std::map<std::string, std::string, std::less<>>;
using IntTuple = std::vector<int64_t>;  // MXNet tuples that may hold negatives (Reshape)

enum AttrFlag { kOptional = 0, kRequired = 1 };

// Codec for one attribute value type: parse MXNet's string form, print it back.
// Specialized for bool, int, int64_t, double, float, std::string, DType, Shape,
// IntTuple and std::optional<T>. Throws ValueError on malformed text.
bool parse_attr(std::string_view s, bool*);
int parse_attr(std::string_view s, int*);
int64_t parse_attr(std::string_view s, int64_t*);
double parse_attr(std::string_view s, double*);
float parse_attr(std::string_view s, float*);
std::string parse_attr(std::string_view s, std::string*);
DType parse_attr(std::string_view s, DType*);
Shape parse_attr(std::string_view s, Shape*);
IntTuple parse_attr(std::string_view s, IntTuple*);
template <typename T>
std::optional<T> parse_attr(std::string_view s, std::optional<T>*) {
  if (s == "None" || s.empty()) return std::nullopt;
  return parse_attr(s, static_cast<T*>(nullptr));
}

std::string print_attr(bool v);
std::string print_attr(int v);
std::string print_attr(int64_t v);
std::string print_attr(double v);  // shortest text that round-trips
std::string print_attr(float v);
std::string print_attr(const std::string& v);
std::string print_attr(DType v);
std::string print_attr(const Shape& v);
std::string print_attr(const IntTuple& v);
template <typename T>
std::string print_attr(const std::optional<T>& v) {
  return v ? print_attr(*v) : std::string("None");
}

class OpAttrs {
 public:
  OpAttrs() = default;  // an op without attributes

  template <typename T>
  static OpAttrs make(T value) {
    OpAttrs a;
    a.holder_ = std::make_shared<const Holder<T>>(std::move(value));
    return a;
  }

  // Parses `strings` into T; unknown keys throw ValueError naming `op` and the key,
  // missing required keys throw ValueError naming both.
  template <typename T>
  static OpAttrs parse(std::string_view op, const AttrMap& strings);

  bool empty() const { return holder_ == nullptr; }
  // True when both share one attributes object (or both are empty).
  bool same(const OpAttrs& o) const { return holder_ == o.holder_; }

  template <typename T>
  const T& as() const {
    KILN_ASSERT(holder_ != nullptr && holder_->type() == typeid(T));
    return static_cast<const Holder<T>*>(holder_.get())->value;
  }

  // Every field whose value differs from the default, plus required fields.
  AttrMap to_strings() const { return holder_ ? holder_->to_strings() : AttrMap{}; }
  size_t hash() const { return holder_ ? holder_->hash() : 0; }
  bool operator==(const OpAttrs& o) const;

 private:
  struct HolderBase {
    virtual ~HolderBase() = default;
    virtual const std::type_info& type() const = 0;
    virtual AttrMap to_strings() const = 0;
    virtual size_t hash() const = 0;
  };
  template <typename T>
  struct Holder final : HolderBase {
    explicit Holder(T v) : value(std::move(v)) {}
    const std::type_info& type() const override { return typeid(T); }
    AttrMap to_strings() const override;
    size_t hash() const override;
    T value;
  };

  std::shared_ptr<const HolderBase> holder_;
};

namespace detail {

struct PrintVisitor {
  AttrMap* out;
  const void* defaults_base;
  const void* value_base;
  template <typename F>
  void operator()(const char* name, const F& field, AttrFlag flag = kOptional) {
    // Locate the same field in the default-constructed struct by offset.
    auto offset = reinterpret_cast<const char*>(&field) - static_cast<const char*>(value_base);
    const F& def = *reinterpret_cast<const F*>(static_cast<const char*>(defaults_base) + offset);
    if (flag == kRequired || !(field == def)) (*out)[name] = print_attr(field);
  }
};

struct ParseVisitor {
  const AttrMap* in;
  std::string_view op;
  size_t used = 0;
  template <typename F>
  void operator()(const char* name, F& field, AttrFlag flag = kOptional) {
    auto it = in->find(name);
    if (it == in->end()) {
      KILN_CHECK(flag != kRequired, ValueError, "{}: required attribute '{}' is missing", op, name);
      return;
    }
    ++used;
    try {
      field = parse_attr(it->second, static_cast<F*>(nullptr));
    } catch (const Error& e) {
      throw ValueError(fmt::format("{}: attribute {}='{}': {}", op, name, it->second, e.message()));
    }
  }
};

struct NameVisitor {
  std::vector<std::string_view>* names;
  template <typename F>
  void operator()(const char* name, const F&, AttrFlag = kOptional) { names->push_back(name); }
};

struct HashVisitor {
  size_t h = 0x9e3779b97f4a7c15ull;
  template <typename F>
  void operator()(const char*, const F& field, AttrFlag = kOptional) {
    h ^= std::hash<std::string>{}(print_attr(field)) + 0x9e3779b9 + (h << 6) + (h >> 2);
  }
};

// Attribute keys MXNet writes that carry no op semantics ("__layout__",
// "__profiler_scope__", "ctx_group", ...): skipped by parsing.
bool is_ignorable_attr_key(std::string_view key);

}  // namespace detail

template <typename T>
AttrMap OpAttrs::Holder<T>::to_strings() const {
  AttrMap out;
  static const T defaults{};
  detail::PrintVisitor v{&out, &defaults, &value};
  const_cast<T&>(value).fields(v);
  return out;
}

template <typename T>
size_t OpAttrs::Holder<T>::hash() const {
  detail::HashVisitor v;
  const_cast<T&>(value).fields(v);
  return v.h;
}

template <typename T>
OpAttrs OpAttrs::parse(std::string_view op, const AttrMap& strings) {
  T value{};
  detail::ParseVisitor v{&strings, op};
  value.fields(v);
  size_t ignorable = 0;
  for (auto& [k, _] : strings) ignorable += detail::is_ignorable_attr_key(k) ? 1 : 0;
  if (v.used + ignorable != strings.size()) {
    std::vector<std::string_view> known;
    detail::NameVisitor nv{&known};
    value.fields(nv);
    for (auto& [k, _] : strings) {
      bool found = detail::is_ignorable_attr_key(k);
      for (auto n : known) found = found || n == k;
      KILN_CHECK(found, ValueError, "{}: unknown attribute '{}' (known: {})", op, k, fmt::join(known, ", "));
    }
  }
  return make(std::move(value));
}

}  // namespace kiln
