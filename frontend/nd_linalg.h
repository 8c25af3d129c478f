// nd functions of the linalg family. dot and batch_dot are one call to
// `invoke` each (ir/ops/linalg.h has MXNet's shape rules); matmul composes
// them with NumPy's rules.
//
//   NDArray a = nd::ones({2, 3}), b = nd::ones({3, 4});
//   nd::dot(a, b);                                  // [2,4]
//   nd::dot(a, a, false, true);                     // a . a^T: [2,2]
//   nd::batch_dot(nd::ones({5, 2, 3}), nd::ones({5, 3, 4}));   // [5,2,4]
//   nd::matmul(nd::ones({7, 1, 2, 3}), nd::ones({5, 3, 4}));  // [7,5,2,4] (batch axes broadcast)
//
// Errors (at the call): ShapeError naming both shapes when they do not fit,
// TypeError when the dtypes differ or are not float32/float64/int32/int64.
#pragma once

#include "frontend/ndarray.h"

namespace kiln::nd {

// MXNet's dot: a's leading axes (a's trailing ones when transpose_a) times b's trailing axes.
NDArray dot(const NDArray& a, const NDArray& b, bool transpose_a = false, bool transpose_b = false);
// Matrix products of the last two axes of N-D arrays (N >= 3) with equal leading axes.
NDArray batch_dot(const NDArray& a, const NDArray& b, bool transpose_a = false, bool transpose_b = false);
// NumPy's matmul: 1-D operands promoted to matrices, batch axes broadcast.
NDArray matmul(const NDArray& a, const NDArray& b);

}  // namespace kiln::nd
