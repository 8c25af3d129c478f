#include "frontend/nd_attention.h"

#include <cmath>

#include "frontend/invoke.h"
#include "ir/ops/attention.h"
#include "runtime/kernel.h"

#include "frontend/nd_elemwise.h"
#include "frontend/nd_init.h"
#include "frontend/nd_linalg.h"
#include "frontend/nd_mask.h"
#include "frontend/nd_matrix.h"
#include "frontend/nd_nn.h"

namespace kiln::nd {
namespace {

void check_shapes(const NDArray& q, const NDArray& k, const NDArray& v) {
  const Shape &qs = q.shape(), &ks = k.shape(), &vs = v.shape();
  const int r = qs.ndim();
  KILN_CHECK(r >= 3 && ks.ndim() == r && vs.ndim() == r, ShapeError,
             "scaled_dot_product_attention: q, k and v need the same rank >= 3 ([..., T, D]), got q {}, k {}, v {}",
             qs, ks, vs);
  bool fits = qs[r - 1] == ks[r - 1] && ks[r - 2] == vs[r - 2];
  for (int i = 0; i + 2 < r; ++i) fits = fits && qs[i] == ks[i] && ks[i] == vs[i];
  KILN_CHECK(fits, ShapeError,
             "scaled_dot_product_attention: expected q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with equal "
             "leading axes, got q {}, k {}, v {}",
             qs, ks, vs);
  KILN_CHECK(q.dtype() == k.dtype() && k.dtype() == v.dtype(), TypeError,
             "scaled_dot_product_attention: q, k and v need one dtype, got {}, {} and {}", q.dtype(), k.dtype(),
             v.dtype());
}

}  // namespace

NDArray causal_mask(int64_t tq, int64_t tk, ArrayOptions options) {
  KILN_CHECK(tq >= 0 && tk >= 0 && tq <= tk, ValueError,
             "causal_mask: expected 0 <= tq <= tk, got tq {} and tk {}", tq, tk);
  const double offset = static_cast<double>(tk - tq);
  NDArray query = nd::expand_dims(nd::arange(offset, static_cast<double>(tk), 1, options), 1);  // [tq, 1]
  NDArray key = nd::expand_dims(nd::arange(0, static_cast<double>(tk), 1, options), 0);         // [1, tk]
  return key <= query;
}

NDArray attention_reference(const NDArray& q, const NDArray& k, const NDArray& v, const AttentionOptions& options) {
  check_shapes(q, k, v);
  const Shape& qs = q.shape();
  const int64_t tq = qs[qs.ndim() - 2], tk = k.shape()[qs.ndim() - 2], d = qs[qs.ndim() - 1];
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  NDArray scores = nd::batch_dot(q, k, false, true) * scale;  // [..., Tq, Tk]
  std::optional<NDArray> mask = options.mask;
  if (options.causal) {
    NDArray c = causal_mask(tq, tk, {scores.dtype(), scores.device()});
    mask = mask ? nd::broadcast_to(c, scores.shape()) * (*mask != 0.0).astype(scores.dtype()) : c;
  }
  NDArray p = mask ? nd::masked_softmax(scores, *mask) : nd::softmax(scores);
  return nd::batch_dot(p, v);
}

NDArray scaled_dot_product_attention(const NDArray& q, const NDArray& k, const NDArray& v,
                                     const AttentionOptions& options) {
  check_shapes(q, k, v);
  if (options.mask || !has_kernel(OpId::kAttention, q.device().kind))
    return attention_reference(q, k, v, options);
  const AttentionAttrs attrs{.causal = options.causal, .scale = options.scale};
  return invoke(OpId::kAttention, {q, k, v}, OpAttrs::make(attrs))[0];
}

}  // namespace kiln::nd
