// nd functions of the matrix family: layout and indexing. Each is one call to
// `invoke` with the op's attributes (ir/ops/matrix.h has the exact rules).
//
//   NDArray x = nd::arange(24).reshape({2, 3, 4});
//   NDArray y = nd::transpose(x, {0, 2, 1});                // [2,4,3]
//   NDArray z = nd::slice(x, {0, std::nullopt}, {1, std::nullopt}, {1, -1});  // x[0:1, ::-1]
//   auto parts = nd::split(x, 3, 1, true);                    // three [2,4]
//   NDArray e = nd::take(nd::ones({10, 8}), nd::array(std::vector<int32_t>{3, 1}));  // [2,8]
//
// `reshape` queues a copy (the Reshape op, as in graphs); NDArray::reshape is
// the zero-copy view with the same rules.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "frontend/ndarray.h"
#include "ir/ops/matrix.h"

namespace kiln::nd {

NDArray reshape(const NDArray& x, const IntTuple& shape, bool reverse = false);
// Permutes the axes; empty `axes` reverses them.
NDArray transpose(const NDArray& x, const IntTuple& axes = {});
// Python slicing of the leading axes: x[begin[0]:end[0]:step[0], ...].
NDArray slice(const NDArray& x, const OptIntTuple& begin, const OptIntTuple& end, const OptIntTuple& step = {});
NDArray slice_axis(const NDArray& x, int axis, int64_t begin, std::optional<int64_t> end);
NDArray concat(const std::vector<NDArray>& xs, int axis = 1);
NDArray stack(const std::vector<NDArray>& xs, int axis = 0);
std::vector<NDArray> split(const NDArray& x, int num_outputs, int axis = 1, bool squeeze_axis = false);
NDArray take(const NDArray& a, const NDArray& indices, int axis = 0, TakeMode mode = TakeMode::kClip);
NDArray one_hot(const NDArray& indices, int64_t depth, double on_value = 1, double off_value = 0,
                DType dtype = DType::kFloat32);
NDArray expand_dims(const NDArray& x, int axis);
// Broadcasts to `shape`; 0 in `shape` keeps the input's dim.
NDArray broadcast_to(const NDArray& x, const Shape& shape);

}  // namespace kiln::nd
