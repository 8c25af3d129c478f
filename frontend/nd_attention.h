// Scaled dot-product attention on NDArrays: softmax(q k^T * scale) v with an
// optional causal or padding mask.
//
//   NDArray q = ..., k = ..., v = ...;                  // [B, H, T, D]
//   NDArray y = nd::scaled_dot_product_attention(q, k, v, {.causal = true});   // [B, H, T, D]
//   NDArray r = nd::attention_reference(q, k, v, {.causal = true});           // the same, decomposed
//
// Shapes: q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with equal leading
// axes (at least one); the result is [..., Tq, Dv]. scale defaults to
// 1/sqrt(D).
//
// causal: query i may attend to key j when j <= i + (Tk - Tq), so the last
// query sees every key. With Tq == Tk this is the usual lower triangle; with
// Tq < Tk (new queries against a KV cache holding earlier positions) the
// queries are the last Tq positions of the sequence.
//
// mask: a padding or custom mask, nonzero where attention is allowed, that
// broadcasts to [..., Tq, Tk] (nd::masked_softmax); it combines with causal.
// A query row with no allowed key gives zeros.
//
// attention_reference is the decomposition (batch_dot, masked_softmax,
// batch_dot): it is what tests compare against. scaled_dot_product_attention
// gives the same values and gradients: without a mask, on a device with a
// kernel for it (the CPU), it runs one fused op, _kiln_attention
// (ir/ops/attention.h: flash-style tiles, O(T) memory per head, the row
// logsumexp saved for the backward); with a mask, or elsewhere, the
// decomposition. ONNX export writes the fused op as the decomposition; MXNet
// JSON keeps it as _kiln_attention.
//
// Errors (at the call): ShapeError naming the shapes when q, k and v do not
// fit or the mask does not broadcast; TypeError when their dtypes differ or
// are not floating (fused path); ValueError for causal with Tq > Tk.
#pragma once

#include <optional>

#include "frontend/ndarray.h"

namespace kiln::nd {

struct AttentionOptions {
  bool causal = false;
  std::optional<double> scale;  // default 1/sqrt(D)
  std::optional<NDArray> mask;  // nonzero = attend; broadcasts to [..., Tq, Tk]
};

NDArray scaled_dot_product_attention(const NDArray& q, const NDArray& k, const NDArray& v,
                                     const AttentionOptions& options = {});
NDArray attention_reference(const NDArray& q, const NDArray& k, const NDArray& v,
                            const AttentionOptions& options = {});

// [tq, tk] in options.dtype: 1 where key j <= i + (tk - tq), else 0 (the
// causal rule above). ValueError for negative lengths or tq > tk.
NDArray causal_mask(int64_t tq, int64_t tk, ArrayOptions options = {});

}  // namespace kiln::nd
