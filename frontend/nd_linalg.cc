#include "frontend/nd_linalg.h"

#include <vector>

#include "frontend/invoke.h"
#include "frontend/nd_matrix.h"
#include "ir/ops/linalg.h"

namespace kiln::nd {

NDArray dot(const NDArray& a, const NDArray& b, bool transpose_a, bool transpose_b) {
  return invoke1(OpId::kDot, {a, b}, OpAttrs::make(DotAttrs{.transpose_a = transpose_a, .transpose_b = transpose_b}));
}

NDArray batch_dot(const NDArray& a, const NDArray& b, bool transpose_a, bool transpose_b) {
  return invoke1(OpId::kBatchDot, {a, b},
                 OpAttrs::make(DotAttrs{.transpose_a = transpose_a, .transpose_b = transpose_b}));
}

namespace {

Shape leading(const Shape& s, int drop) { return Shape(s.dims().first(s.ndim() - drop)); }

}  // namespace

NDArray matmul(const NDArray& a, const NDArray& b) {
  KILN_CHECK(a.ndim() >= 1 && b.ndim() >= 1, ShapeError, "matmul: scalars are not accepted (shapes {} and {})",
             a.shape(), b.shape());
  // Up to 2-D on the right, MXNet's dot already is NumPy's matmul: a's leading
  // axes stay, b's single trailing axis (if any) is appended.
  if (b.ndim() <= 2) return dot(a, b);
  // b is a stack of matrices; a vector is a 1-row matrix whose row axis goes
  // away at the end. Only ops (no views), so autograd and tracing see every step.
  const bool vector_a = a.ndim() == 1;
  NDArray am = vector_a ? expand_dims(a, 0) : a;
  const Shape& as = am.shape();
  const Shape& bs = b.shape();
  const int64_t m = as[as.ndim() - 2], k = as[as.ndim() - 1], n = bs[bs.ndim() - 1];
  KILN_CHECK(k == bs[bs.ndim() - 2], ShapeError,
             "matmul: shapes {} and {} do not fit (last axis of the first is {}, second-to-last of the second is {})",
             a.shape(), b.shape(), k, bs[bs.ndim() - 2]);
  Shape batch = broadcast_shapes(leading(as, 2), leading(bs, 2), "matmul");
  Shape a_full = batch, b_full = batch;
  a_full.push_back(m);
  a_full.push_back(k);
  b_full.push_back(k);
  b_full.push_back(n);
  NDArray c = batch_dot(as == a_full ? am : broadcast_to(am, a_full), bs == b_full ? b : broadcast_to(b, b_full));
  if (!vector_a) return c;
  IntTuple out = batch.to_vector();
  out.push_back(n);
  return reshape(c, out);
}

}  // namespace kiln::nd
