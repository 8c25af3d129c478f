// Attributes and geometry of _kiln_attention and _backward_kiln_attention:
// scaled dot-product attention as one op (frontend/nd_attention.h is the
// user's entry point; this is what it runs where a device has the kernel).
//
//   AttentionAttrs a{.causal = true};                      // scale: 1/sqrt(D)
//   std::vector<NDArray> o = invoke(OpId::kAttention, {q, k, v}, OpAttrs::make(a));   // out, lse
//
// _kiln_attention(q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv]) ->
// (out [..., Tq, Dv], lse [..., Tq]): with S = scale * q k^T and, when
// causal, key j allowed for query i iff j <= i + (Tk - Tq),
//   lse[i] = log sum_{allowed j} exp(S[i, j])
//   out[i] = sum_{allowed j} exp(S[i, j] - lse[i]) v[j]
// A row with no allowed key (Tk == 0) gives out 0 and lse -inf. Leading axes
// of q, k and v are equal (at least one); causal needs Tq <= Tk. q, k and v
// share one floating dtype; out has it, lse is float32 (float64 for float64
// inputs, whose gradients are checked to 1e-12 and so need lse unrounded).
// lse is the auxiliary output the backward reads; it is differentiable too.
//
// _backward_kiln_attention(dout, dlse, q, k, v, out, lse) -> (dq, dk, dv):
// with P = exp(S - lse) on allowed entries (0 elsewhere) and
// Di = sum_c dout[i, c] out[i, c] - dlse[i],
//   dv = P^T dout,  dS = P * (dout v^T - Di),  dq = scale dS k,  dk = scale dS^T q
// (d lse[i] / d S[i, j] = P[i, j], so lse's gradient costs one subtraction
// per row; autograd hands zeros for an output nobody read). dlse and lse are
// float32 (float64 for float64 data). The op is evaluated at the given out
// and lse (not recomputed), so that it is a function of its seven inputs
// that ordinary ops also express; its own gradient (second order) is that
// expression differentiated.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include <span>
#include <vector>

#include "ir/attrs.h"
#include "ir/grad.h"
#include "ir/shape.h"

namespace kiln {

struct AttentionAttrs {
  bool causal = false;
  std::optional<double> scale;  // None: 1/sqrt(D)
  template <typename V>
  void fields(V& v) {
    v("causal", causal);
    v("scale", scale);
  }
};

// q, k, v seen as `batch` independent problems of [tq, d], [tk, d], [tk, dv].
struct AttentionDims {
  int64_t batch = 1, tq = 0, tk = 0, d = 0, dv = 0;
  double scale = 1;
  bool causal = false;
  // Keys [0, allowed(i)) are visible to query i.
  int64_t allowed(int64_t i) const { return causal ? std::min(tk, i + 1 + (tk - tq)) : tk; }
};

// The dims of a call whose shapes inference has accepted.
AttentionDims attention_dims(const AttentionAttrs& a, const Shape& q, const Shape& k, const Shape& v);

// The decompositions of the two ops (ir/decompose.h): the formulas above in
// ordinary ops, computed in float32 (float64 for float64 data) from the
// inputs widened once, each result rounded once to the data's dtype, as the
// fused kernels do. The forward materializes the [..., Tq, Tk] scores (it is
// the fallback for devices without the fused kernel, not a replacement).
std::vector<GradValue> decompose_attention(GradBuilder& b, std::span<const GradValue> inputs, const OpAttrs& attrs);
std::vector<GradValue> decompose_attention_backward(GradBuilder& b, std::span<const GradValue> inputs,
                                                    const OpAttrs& attrs);

}  // namespace kiln
