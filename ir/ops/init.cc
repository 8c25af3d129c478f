#include "ir/ops/init.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "ir/op.h"

namespace kiln {
namespace {

template <typename A>
void infer_from_attrs(const OpAttrs& attrs, std::span<const TensorType>, std::vector<TensorType>& out) {
  const auto& a = attrs.as<A>();
  out.push_back({a.shape, a.dtype});
}

// An integer fill must fit its dtype: casting a value out of range (or NaN)
// to an integer has no defined result.
void infer_full(const OpAttrs& attrs, std::span<const TensorType>, std::vector<TensorType>& out) {
  const auto& a = attrs.as<FullAttrs>();
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const double end = std::ldexp(1.0, std::numeric_limits<T>::digits);  // exactly 2^digits
      const double begin = std::is_signed_v<T> ? -end : 0.0;
      KILN_CHECK(a.value >= begin && a.value < end, ValueError,
                 "value {} does not fit dtype {} (expected a number in [{}, {}))", a.value, a.dtype, begin, end);
    }
  });
  out.push_back({a.shape, a.dtype});
}

void infer_arange(const OpAttrs& attrs, std::span<const TensorType>, std::vector<TensorType>& out) {
  const auto& a = attrs.as<ArangeAttrs>();
  double start = a.stop ? a.start : 0, stop = a.stop ? *a.stop : a.start;
  KILN_CHECK(a.step != 0, ValueError, "step must not be 0");
  KILN_CHECK(a.repeat >= 1, ValueError, "repeat must be >= 1, got {}", a.repeat);
  double n = std::ceil((stop - start) / a.step);
  out.push_back({Shape{static_cast<int64_t>(std::max(0.0, n)) * a.repeat}, a.dtype});
}

void define_init(OpRegistry& r, OpId id, std::string_view doc, InferFn infer, ParseAttrsFn parse) {
  OpDef& d = r.define(id, doc);
  d.num_inputs = 0;
  d.infer = infer;
  d.parse_attrs = parse;
  d.differentiable = false;
}

}  // namespace

void register_init_ops(OpRegistry& r) {
  define_init(r, OpId::kZeros, "An array of zeros.", infer_from_attrs<InitAttrs>, parse_attrs_as<InitAttrs>);
  define_init(r, OpId::kOnes, "An array of ones.", infer_from_attrs<InitAttrs>, parse_attrs_as<InitAttrs>);
  define_init(r, OpId::kFull, "An array filled with `value`.", infer_full, parse_attrs_as<FullAttrs>);
  define_init(r, OpId::kArange, "Evenly spaced values in [start, stop).", infer_arange, parse_attrs_as<ArangeAttrs>);
  define_init(r, OpId::kRandomUniform, "Uniform samples in [a, b).", infer_from_attrs<RandomAttrs>,
              parse_attrs_as<RandomAttrs>);
  define_init(r, OpId::kRandomNormal, "Normal samples with mean a and standard deviation b.",
              infer_from_attrs<RandomAttrs>, parse_attrs_as<RandomAttrs>);
  r.alias("zeros", OpId::kZeros);
  r.alias("ones", OpId::kOnes);
  r.alias("full", OpId::kFull);
  r.alias("arange", OpId::kArange);
  r.alias("random_uniform", OpId::kRandomUniform);
  r.alias("uniform", OpId::kRandomUniform);
  r.alias("random_normal", OpId::kRandomNormal);
  r.alias("normal", OpId::kRandomNormal);
}

}  // namespace kiln
