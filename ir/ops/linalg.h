// Attributes of the linalg family (dot, batch_dot) and the shape rule shared
// by inference and kernels.
//
//   DotAttrs a{.transpose_b = true};
//   MatmulDims d = dot_dims(Shape{2, 3, 4}, Shape{5, 4}, a);  // batch 1, m 6, k 4, n 5
//   d.out == Shape{2, 3, 5}
//
// dot (MXNet's rule): the lhs is a matrix [M, K] made of its leading axes and
// its last axis (transpose_a: its first axis is K and the rest is M); the rhs
// is [K, N] made of its first axis and the rest (transpose_b: its last axis is
// K and the leading ones N). The output is lhs-M axes ++ rhs-N axes; 1-D
// operands contribute no axes, so vector . vector is a scalar (shape []).
// batch_dot: both N-D (N >= 3) with equal leading (batch) axes, the last two
// axes of each multiplied as matrices (transposed as asked).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ir/attrs.h"

namespace kiln {

// dot, batch_dot. `forward_stype` is accepted for MXNet files; only None or
// "default" (dense) is supported.
struct DotAttrs {
  bool transpose_a = false;
  bool transpose_b = false;
  std::optional<std::string> forward_stype;
  template <typename V>
  void fields(V& v) {
    v("transpose_a", transpose_a);
    v("transpose_b", transpose_b);
    v("forward_stype", forward_stype);
  }
};

// out[b] = op(A[b]) . op(B[b]) with op(A[b]) [m, k] and op(B[b]) [k, n]; the
// operands are dense row-major, A[b] stored [m, k] or, when ta, [k, m];
// B[b] stored [k, n] or, when tb, [n, k].
struct MatmulDims {
  int64_t batch = 1, m = 1, k = 1, n = 1;
  bool ta = false, tb = false;
  Shape out;
};

// Throw ShapeError naming both shapes (and the transposes) when they do not
// fit. Dtypes are checked by inference alone.
MatmulDims dot_dims(const Shape& a, const Shape& b, const DotAttrs& attrs);
MatmulDims batch_dot_dims(const Shape& a, const Shape& b, const DotAttrs& attrs);

}  // namespace kiln
