// Attributes of the elemwise family: binary, broadcast, scalar and unary
// elementwise ops, plus clip, Cast and where. Names and defaults are MXNet's,
// so exported graphs round-trip.
//
//   NDArray y = invoke1(OpId::kPlusScalar, {x}, OpAttrs::make(ScalarAttrs{.scalar = 2}));
//   NDArray z = invoke1(OpId::kClip, {x}, OpAttrs::make(ClipAttrs{.a_min = 0, .a_max = 6}));
//   NDArray w = invoke1(OpId::kCast, {x}, OpAttrs::make(CastAttrs{.dtype = DType::kInt32}));
//
// Dtype rules (checked by inference, ir/ops/elemwise.cc):
//   - binary ops need equal input dtypes; comparisons return the input dtype
//     holding 1 or 0 (MXNet's legacy semantics);
//   - arithmetic, comparison, relu, abs, negative, square and clip take
//     float32/64, float16, bfloat16, uint8, int8, int32 and int64
//     (broadcast_mod and broadcast_fmod uint64 too);
//   - exp, log, sqrt, tanh and sigmoid take floating-point dtypes only;
//   - _copy, Cast and where take every dtype (where's x and y must match).
// Integer arithmetic wraps around; integer division by zero gives 0.
#pragma once

#include "ir/attrs.h"

namespace kiln {

// _plus_scalar, _rminus_scalar, _equal_scalar, ... : `x op scalar` (or
// `scalar op x` for the _r ops). For integer arrays the scalar is first
// converted to the array's dtype (truncated toward zero, saturated to the
// dtype's range), as MXNet 1.x does. `is_int` is MXNet 2's hint that the
// scalar was a Python int; it is accepted and changes nothing.
struct ScalarAttrs {
  double scalar = 1;
  bool is_int = false;
  template <typename V>
  void fields(V& v) {
    v("scalar", scalar, kRequired);
    v("is_int", is_int);
  }
};

// clip: min(max(x, a_min), a_max); bounds converted to the array's dtype as
// for ScalarAttrs.
struct ClipAttrs {
  double a_min = 0;
  double a_max = 0;
  template <typename V>
  void fields(V& v) {
    v("a_min", a_min, kRequired);
    v("a_max", a_max, kRequired);
  }
};

// Cast: converts every element to `dtype` (C++ conversion rules; float to
// bool is `x != 0`).
struct CastAttrs {
  DType dtype = DType::kFloat32;
  template <typename V>
  void fields(V& v) {
    v("dtype", dtype, kRequired);
  }
};

}  // namespace kiln
