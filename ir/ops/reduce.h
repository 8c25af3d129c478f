// Attributes of the reduce family (sum, mean, max, min, prod, argmax, argmin,
// norm) and the axis resolution shared by inference and kernels.
//
//   auto attrs = OpAttrs::make(ReduceAttrs{.axis = IntTuple{0, -1}, .keepdims = true});
//   uint32_t mask = reduce_axes_mask(Shape{2, 3, 4}, attrs.as<ReduceAttrs>().axis, false);  // 0b101
//   reduced_shape(Shape{2, 3, 4}, mask, true) == Shape{1, 3, 1}
//
// Semantics follow MXNet: `axis` None (or the empty tuple) reduces every axis;
// negative axes count from the end; `exclude` reduces every axis NOT listed.
// Reducing every axis without keepdims gives a scalar (shape []), as NumPy
// does (MXNet 1.x gives [1]).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "ir/attrs.h"

namespace kiln {

// sum, mean, max, min, prod
struct ReduceAttrs {
  std::optional<IntTuple> axis;
  bool keepdims = false;
  bool exclude = false;
  template <typename V>
  void fields(V& v) {
    v("axis", axis);
    v("keepdims", keepdims);
    v("exclude", exclude);
  }
};

// argmax, argmin: indices along one axis (None: of the flattened array),
// returned in the input's dtype (MXNet's legacy convention); first occurrence
// wins on ties, and the first NaN counts as the extremum.
struct ArgReduceAttrs {
  std::optional<int> axis;
  bool keepdims = false;
  template <typename V>
  void fields(V& v) {
    v("axis", axis);
    v("keepdims", keepdims);
  }
};

// norm: the L1 (ord 1) or L2 (ord 2) norm of the elements over `axis` (None:
// all). Over two axes ord 2 is the Frobenius norm; ord 1 is the entrywise sum
// of absolute values. `out_dtype` is accepted for MXNet files and must be
// None or the input's dtype.
struct NormAttrs {
  int ord = 2;
  std::optional<IntTuple> axis;
  std::optional<DType> out_dtype;
  bool keepdims = false;
  template <typename V>
  void fields(V& v) {
    v("ord", ord);
    v("axis", axis);
    v("out_dtype", out_dtype);
    v("keepdims", keepdims);
  }
};

// Bit i set: axis i of `in` is reduced. `axis` None or empty: every axis.
// Throws IndexError for an axis out of range and ValueError for a repeated
// axis (messages name the axis and the number of axes, not the op: inference
// callers prefix the op).
uint32_t reduce_axes_mask(const Shape& in, const std::optional<IntTuple>& axis, bool exclude);

// `in` with the axes in `mask` removed (keepdims: set to 1).
Shape reduced_shape(const Shape& in, uint32_t mask, bool keepdims);

// Number of input elements that reduce into each output element.
int64_t reduce_count(const Shape& in, uint32_t mask);

}  // namespace kiln
