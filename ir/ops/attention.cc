// _kiln_attention and _backward_kiln_attention: inference and gradients
// (semantics in ir/ops/attention.h).
//
// The forward's gradient sends out's gradient through the fused backward op
// and lse's (d lse[i] / d S[i, j] = P[i, j]) through ordinary ops. Because
// lse's gradient is passed on, the backward op may read out and lse as
// independent inputs, and its own gradient is its formula in ordinary ops
// (grad_of_composite): a second differentiation reaches q, k and v through the
// forward node's outputs.
#include "ir/ops/attention.h"

#include <cmath>

#include "ir/grad.h"
#include "ir/grad_ops.h"
#include "ir/op.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/init.h"
#include "ir/ops/linalg.h"

namespace kiln {

AttentionDims attention_dims(const AttentionAttrs& a, const Shape& q, const Shape& k, const Shape& v) {
  const int r = q.ndim();
  AttentionDims d;
  for (int i = 0; i + 2 < r; ++i) d.batch *= q[i];
  d.tq = q[r - 2];
  d.d = q[r - 1];
  d.tk = k[r - 2];
  d.dv = v[r - 1];
  d.scale = a.scale.value_or(d.d > 0 ? 1.0 / std::sqrt(static_cast<double>(d.d)) : 1.0);
  d.causal = a.causal;
  return d;
}

namespace {

using grad_ops::mul;
using grad_ops::scalar;
using grad_ops::sub;

DType lse_dtype(DType t) { return t == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

void check_qkv(const AttentionAttrs& a, const TensorType& q, const TensorType& k, const TensorType& v) {
  const Shape &qs = q.shape, &ks = k.shape, &vs = v.shape;
  const int r = qs.ndim();
  KILN_CHECK(r >= 3 && ks.ndim() == r && vs.ndim() == r, ShapeError,
             "q, k and v need the same rank >= 3 ([..., T, D]), got q {}, k {}, v {}", qs, ks, vs);
  bool fits = qs[r - 1] == ks[r - 1] && ks[r - 2] == vs[r - 2];
  for (int i = 0; i + 2 < r; ++i) fits = fits && qs[i] == ks[i] && ks[i] == vs[i];
  KILN_CHECK(fits, ShapeError,
             "expected q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with equal leading axes, got q {}, k {}, v {}",
             qs, ks, vs);
  KILN_CHECK(is_floating(q.dtype), TypeError, "q, k and v must be floating, got {}", q.dtype);
  KILN_CHECK(q.dtype == k.dtype && k.dtype == v.dtype, TypeError, "q, k and v need one dtype, got {}, {} and {}",
             q.dtype, k.dtype, v.dtype);
  KILN_CHECK(!a.causal || qs[r - 2] <= ks[r - 2], ValueError,
             "causal attention needs Tq <= Tk (queries are the last Tq positions), got q {} and k {}", qs, ks);
}

Shape out_shape(const Shape& q, const Shape& v) {
  Shape s = q;
  s[s.ndim() - 1] = v[v.ndim() - 1];
  return s;
}

Shape lse_shape(const Shape& q) {
  Shape s;
  for (int i = 0; i + 1 < q.ndim(); ++i) s.push_back(q[i]);
  return s;
}

// (q, k, v) -> (out, lse)
void infer_attention(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_qkv(attrs.as<AttentionAttrs>(), in[0], in[1], in[2]);
  out.push_back({out_shape(in[0].shape, in[2].shape), in[0].dtype});
  out.push_back({lse_shape(in[0].shape), lse_dtype(in[0].dtype)});
}

// (dout, q, k, v, out, lse) -> (dq, dk, dv)
void infer_attention_backward(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_qkv(attrs.as<AttentionAttrs>(), in[1], in[2], in[3]);
  const Shape o = out_shape(in[1].shape, in[3].shape);
  const DType t = in[1].dtype;
  KILN_CHECK(in[0].shape == o && in[0].dtype == t, ShapeError, "dout is {}{} but the output is {}{}", in[0].dtype,
             in[0].shape, t, o);
  KILN_CHECK(in[4].shape == o && in[4].dtype == t, ShapeError, "out is {}{} but must be {}{}", in[4].dtype,
             in[4].shape, t, o);
  const Shape l = lse_shape(in[1].shape);
  KILN_CHECK(in[5].shape == l && in[5].dtype == lse_dtype(t), ShapeError, "lse is {}{} but must be {}{}",
             in[5].dtype, in[5].shape, lse_dtype(t), l);
  out.push_back(in[1]);
  out.push_back(in[2]);
  out.push_back(in[3]);
}

// ---- the math in ordinary ops (second order, and lse's gradient)

GradValue batch_dot(GradBuilder& b, GradValue x, GradValue y, bool ta, bool tb) {
  return b.op(OpId::kBatchDot, {x, y}, OpAttrs::make(DotAttrs{.transpose_a = ta, .transpose_b = tb}));
}

// [tq, tk] of `t`: 1 where key j <= i + (tk - tq), else 0.
GradValue causal_mask(GradBuilder& b, int64_t tq, int64_t tk, DType t) {
  auto arange = [&](double start, int64_t n) {
    return b.op(OpId::kArange, {},
                OpAttrs::make(ArangeAttrs{.start = start, .stop = start + static_cast<double>(n), .dtype = t}));
  };
  GradValue query = grad_ops::reshape_to(b, arange(static_cast<double>(tk - tq), tq), Shape{tq, 1});
  GradValue key = grad_ops::reshape_to(b, arange(0, tk), Shape{1, tk});
  return b.op(OpId::kBroadcastLesserEqual, {key, query});
}

// P = exp(S - lse) on allowed entries, 0 elsewhere, [..., Tq, Tk] in q's dtype.
GradValue probabilities(GradBuilder& b, const AttentionDims& d, GradValue q, GradValue k, GradValue lse) {
  const TensorType qt = b.type(q);
  if (b.type(lse).dtype != qt.dtype) lse = b.op(OpId::kCast, {lse}, OpAttrs::make(CastAttrs{qt.dtype}));
  Shape col = b.type(lse).shape;
  col.push_back(1);
  GradValue s = scalar(b, OpId::kMulScalar, batch_dot(b, q, k, false, true), d.scale);
  GradValue e = sub(b, s, grad_ops::reshape_to(b, lse, col));
  if (!d.causal) return grad_ops::unary(b, OpId::kExp, e);
  // Masked entries are zeroed before exp, so they cannot overflow.
  GradValue m = causal_mask(b, d.tq, d.tk, qt.dtype);
  return mul(b, grad_ops::unary(b, OpId::kExp, mul(b, e, m)), m);
}

// dq and dk of a given dS: scale dS k, scale dS^T q.
std::pair<GradValue, GradValue> grads_of_scores(GradBuilder& b, const AttentionDims& d, GradValue ds, GradValue q,
                                                GradValue k) {
  return {scalar(b, OpId::kMulScalar, batch_dot(b, ds, k, false, false), d.scale),
          scalar(b, OpId::kMulScalar, batch_dot(b, ds, q, true, false), d.scale)};
}

AttentionDims dims_of(const GradArgs& g, int first) {
  return attention_dims(g.attrs.as<AttentionAttrs>(), g.input_types[first].shape, g.input_types[first + 1].shape,
                        g.input_types[first + 2].shape);
}

GradValue add_or(GradBuilder& b, GradValue acc, GradValue x) { return acc.is_none() ? x : grad_ops::add(b, acc, x); }

void grad_attention(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  GradValue dout = g.out_grads[0], dlse = g.out_grads[1];
  GradValue q = g.inputs[0], k = g.inputs[1], v = g.inputs[2];
  if (!dout.is_none()) {
    GradValue in[] = {dout, q, k, v, g.outputs[0], g.outputs[1]};
    std::vector<GradValue> r = b.apply(OpId::kAttentionBackward, in, g.attrs);
    for (int i = 0; i < 3; ++i)
      if (g.needs_grad[i]) in_grads[i] = r[i];
  }
  if (dlse.is_none() || !(g.needs_grad[0] || g.needs_grad[1])) return;
  // d lse[i] / d S[i, j] = P[i, j]: dS = P * dlse[i].
  const AttentionDims d = dims_of(g, 0);
  GradValue p = probabilities(b, d, q, k, g.outputs[1]);
  const TensorType pt = b.type(p);
  if (b.type(dlse).dtype != pt.dtype) dlse = b.op(OpId::kCast, {dlse}, OpAttrs::make(CastAttrs{pt.dtype}));
  Shape col = b.type(dlse).shape;
  col.push_back(1);
  GradValue ds = mul(b, p, grad_ops::reshape_to(b, dlse, col));
  auto [dq, dk] = grads_of_scores(b, d, ds, q, k);
  if (g.needs_grad[0]) in_grads[0] = add_or(b, in_grads[0], dq);
  if (g.needs_grad[1]) in_grads[1] = add_or(b, in_grads[1], dk);
}

// _backward_kiln_attention's formula (ir/ops/attention.h) in ordinary ops.
void grad_attention_backward(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  const AttentionDims d = dims_of(g, 1);
  grad_of_composite(b, g, in_grads, [&](GradBuilder& t, std::span<const GradValue> in) {
    GradValue dout = in[0], q = in[1], k = in[2], v = in[3], out = in[4], lse = in[5];
    GradValue p = probabilities(t, d, q, k, lse);
    GradValue dv = batch_dot(t, p, dout, true, false);
    GradValue dp = batch_dot(t, dout, v, false, true);
    GradValue di = grad_ops::sum(t, mul(t, dout, out), {-1}, true);
    GradValue ds = mul(t, p, sub(t, dp, di));
    auto [dq, dk] = grads_of_scores(t, d, ds, q, k);
    return std::vector<GradValue>{dq, dk, dv};
  });
}

}  // namespace

void register_attention_ops(OpRegistry& r) {
  OpDef& fwd = r.define(OpId::kAttention, "Scaled dot-product attention softmax(q k^T scale) v, and its logsumexp.");
  fwd.num_inputs = 3;
  fwd.input_names = {"query", "key", "value"};
  fwd.infer = infer_attention;
  fwd.parse_attrs = parse_attrs_as<AttentionAttrs>;
  fwd.grad = grad_attention;
  fwd.grad_uses_outputs = true;

  OpDef& back = r.define(OpId::kAttentionBackward, "Gradient of _kiln_attention's output with respect to q, k, v.");
  back.num_inputs = 6;
  back.input_names = {"out_grad", "query", "key", "value", "out", "lse"};
  back.infer = infer_attention_backward;
  back.parse_attrs = parse_attrs_as<AttentionAttrs>;
  back.grad = grad_attention_backward;
  back.amp_float32_inputs = 1u << 5;  // lse is float32 whatever the data's dtype
}

}  // namespace kiln
