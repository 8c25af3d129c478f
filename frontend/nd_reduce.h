// nd functions of the reduce family. Each is one call to `invoke` with the
// op's attributes (ir/ops/reduce.h has the exact rules).
//
//   NDArray x = nd::arange(24).reshape({2, 3, 4});
//   nd::sum(x);                          // scalar (shape []): 276
//   nd::sum(x, {0, -1}, true);           // [1,3,1]
//   nd::mean(x, {1}, false, true);       // exclude: reduce axes 0 and 2 -> [3]
//   nd::argmax(x, 2);                    // [2,3] float32 indices
//   nd::norm(x, 1, {1});                 // [2,4]
//
// Empty `axes` means every axis. Negative axes count from the end. Errors
// (at the call): IndexError for an axis out of range, ValueError for a
// repeated axis or for mean/max/min/argmax/argmin over an empty axis,
// TypeError for dtypes an op does not take (mean and norm: floats only).
#pragma once

#include <optional>

#include "frontend/ndarray.h"

namespace kiln::nd {

// Sum over `axes` (exclude: over every other axis).
NDArray sum(const NDArray& x, const IntTuple& axes = {}, bool keepdims = false, bool exclude = false);
// Arithmetic mean over `axes` (float32/float64).
NDArray mean(const NDArray& x, const IntTuple& axes = {}, bool keepdims = false, bool exclude = false);
// Maximum over `axes`; NaN propagates.
NDArray max(const NDArray& x, const IntTuple& axes = {}, bool keepdims = false, bool exclude = false);
// Minimum over `axes`; NaN propagates.
NDArray min(const NDArray& x, const IntTuple& axes = {}, bool keepdims = false, bool exclude = false);
// Product over `axes`.
NDArray prod(const NDArray& x, const IntTuple& axes = {}, bool keepdims = false, bool exclude = false);
// Index of the first maximum along `axis` (none: of the flattened array), in x's dtype.
NDArray argmax(const NDArray& x, std::optional<int> axis = std::nullopt, bool keepdims = false);
// Index of the first minimum along `axis` (none: of the flattened array), in x's dtype.
NDArray argmin(const NDArray& x, std::optional<int> axis = std::nullopt, bool keepdims = false);
// L1 (ord 1) or L2 (ord 2) norm of the elements over `axes` (float32/float64).
NDArray norm(const NDArray& x, int ord = 2, const IntTuple& axes = {}, bool keepdims = false);

}  // namespace kiln::nd
