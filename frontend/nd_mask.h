// Attention masks on NDArrays: a causal mask and softmax restricted to a
// mask, built from ordinary ops (so they differentiate, hybridize, run on
// every backend and export as MXNet's broadcast_to, where, softmax and
// broadcast_mul).
//
//   NDArray m = nd::causal_mask(5);                       // [5, 5]: 1 where key <= query
//   NDArray p = nd::masked_softmax(scores, m);            // scores [N, H, 5, 5]
//   NDArray pad = (nd::arange(5) < 3.0).reshape({1, 5}); // a padding mask: the first 3 keys
//   NDArray q = nd::masked_softmax(scores, pad);
//
// masked_softmax(x, mask, axis): softmax along `axis` over the elements
// whose mask value is nonzero, 0 at the others, a row with no kept element
// all 0. mask broadcasts to x as NumPy does (a [T, T] causal mask over
// [N, H, T, T] scores); any numeric dtype; it gets no gradient. A mask that
// does not broadcast to x is a ShapeError naming both shapes.
#pragma once

#include <cstdint>

#include "frontend/ndarray.h"

namespace kiln::nd {

// [length, length] in options.dtype: mask[i, j] = 1 if j <= i (query i may
// attend to key j), else 0. ValueError for length < 0.
NDArray causal_mask(int64_t length, ArrayOptions options = {});

NDArray masked_softmax(const NDArray& x, const NDArray& mask, int axis = -1);

}  // namespace kiln::nd
