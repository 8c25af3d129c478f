// _kiln_attention and _backward_kiln_attention: inference and gradients
// (semantics in ir/ops/attention.h).
//
// The forward's gradient is the fused backward op, which takes the gradients
// of both outputs. Because lse's gradient is passed on, the backward op may
// read out and lse as independent inputs, and its own gradient is its
// formula in ordinary ops (grad_of_composite): a second differentiation
// reaches q, k and v through the forward node's outputs.
#include "ir/ops/attention.h"

#include <cmath>

#include "ir/grad.h"
#include "ir/grad_ops.h"
#include "ir/op.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/init.h"
#include "ir/ops/linalg.h"
#include "ir/ops/reduce.h"

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

// (dout, dlse, q, k, v, out, lse) -> (dq, dk, dv)
void infer_attention_backward(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  check_qkv(attrs.as<AttentionAttrs>(), in[2], in[3], in[4]);
  const DType t = in[2].dtype;
  const TensorType o{out_shape(in[2].shape, in[4].shape), t}, l{lse_shape(in[2].shape), lse_dtype(t)};
  auto check = [](const TensorType& got, const TensorType& want, const char* name) {
    KILN_CHECK(got == want, ShapeError, "{} is {}{} but must be {}{}", name, got.dtype, got.shape, want.dtype,
               want.shape);
  };
  check(in[0], o, "dout");
  check(in[1], l, "dlse");
  check(in[5], o, "out");
  check(in[6], l, "lse");
  out.push_back(in[2]);
  out.push_back(in[3]);
  out.push_back(in[4]);
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

// v in dtype `t` (v itself when it has it).
GradValue cast_to(GradBuilder& b, GradValue v, DType t) {
  return b.type(v).dtype == t ? v : b.op(OpId::kCast, {v}, OpAttrs::make(CastAttrs{t}));
}

// v as a column [..., Tq, 1] in `t`.
GradValue column(GradBuilder& b, GradValue v, DType t) {
  v = cast_to(b, v, t);
  Shape col = b.type(v).shape;
  col.push_back(1);
  return grad_ops::reshape_to(b, v, col);
}

// P = exp(S - lse) on allowed entries, 0 elsewhere, [..., Tq, Tk] in q's dtype.
GradValue probabilities(GradBuilder& b, const AttentionDims& d, GradValue q, GradValue k, GradValue lse) {
  const DType t = b.type(q).dtype;
  GradValue s = scalar(b, OpId::kMulScalar, batch_dot(b, q, k, false, true), d.scale);
  GradValue e = sub(b, s, column(b, lse, t));
  if (!d.causal) return grad_ops::unary(b, OpId::kExp, e);
  // Masked entries are zeroed before exp, so they cannot overflow.
  GradValue m = causal_mask(b, d.tq, d.tk, t);
  return mul(b, grad_ops::unary(b, OpId::kExp, mul(b, e, m)), m);
}

AttentionDims dims_of(const GradArgs& g, int first) {
  return attention_dims(g.attrs.as<AttentionAttrs>(), g.input_types[first].shape, g.input_types[first + 1].shape,
                        g.input_types[first + 2].shape);
}

// The given gradient, or zeros of `t` where it is none.
GradValue or_zeros(GradBuilder& b, GradValue g, const TensorType& t) {
  return g.is_none() ? b.op(OpId::kZeros, {}, OpAttrs::make(InitAttrs{t.shape, t.dtype})) : g;
}

void grad_attention(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (g.out_grads[0].is_none() && g.out_grads[1].is_none()) return;
  GradValue dout = or_zeros(b, g.out_grads[0], b.type(g.outputs[0]));
  GradValue dlse = or_zeros(b, g.out_grads[1], b.type(g.outputs[1]));
  GradValue in[] = {dout, dlse, g.inputs[0], g.inputs[1], g.inputs[2], g.outputs[0], g.outputs[1]};
  std::vector<GradValue> r = b.apply(OpId::kAttentionBackward, in, g.attrs);
  for (int i = 0; i < 3; ++i)
    if (g.needs_grad[i]) in_grads[i] = r[i];
}

// _backward_kiln_attention's formula (ir/ops/attention.h) in ordinary ops:
// (dout, dlse, q, k, v, out, lse) -> (dq, dk, dv) in q's dtype.
std::vector<GradValue> attention_backward_math(GradBuilder& t, const AttentionDims& d, std::span<const GradValue> in) {
  GradValue dout = in[0], dlse = in[1], q = in[2], k = in[3], v = in[4], out = in[5], lse = in[6];
  const DType dt = t.type(q).dtype;
  GradValue p = probabilities(t, d, q, k, lse);
  GradValue dv = batch_dot(t, p, dout, true, false);
  GradValue dp = batch_dot(t, dout, v, false, true);
  GradValue di = sub(t, grad_ops::sum(t, mul(t, dout, out), {-1}, true), column(t, dlse, dt));
  GradValue ds = mul(t, p, sub(t, dp, di));
  GradValue dq = scalar(t, OpId::kMulScalar, batch_dot(t, ds, k, false, false), d.scale);
  GradValue dk = scalar(t, OpId::kMulScalar, batch_dot(t, ds, q, true, false), d.scale);
  return {dq, dk, dv};
}

void grad_attention_backward(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  const AttentionDims d = dims_of(g, 2);
  grad_of_composite(b, g, in_grads,
                    [&](GradBuilder& t, std::span<const GradValue> in) { return attention_backward_math(t, d, in); });
}

}  // namespace

// The scores S = scale q k^T of allowed keys, -inf elsewhere (S + log(mask)
// adds 0 or -inf exactly); lse = m + log(sum exp(S - m)) with m the row's
// maximum, which is finite because key 0 is allowed for every query.
std::vector<GradValue> decompose_attention(GradBuilder& b, std::span<const GradValue> inputs, const OpAttrs& attrs) {
  const TensorType qt = b.type(inputs[0]);
  const AttentionDims d =
      attention_dims(attrs.as<AttentionAttrs>(), qt.shape, b.type(inputs[1]).shape, b.type(inputs[2]).shape);
  const DType w = lse_dtype(qt.dtype);
  if (d.tk == 0) {  // no key: out 0, lse -inf
    const Shape os = out_shape(qt.shape, b.type(inputs[2]).shape);
    return {b.op(OpId::kZeros, {}, OpAttrs::make(InitAttrs{os, qt.dtype})),
            b.op(OpId::kFull, {}, OpAttrs::make(FullAttrs{lse_shape(qt.shape), w, -INFINITY}))};
  }
  GradValue q = cast_to(b, inputs[0], w), k = cast_to(b, inputs[1], w), v = cast_to(b, inputs[2], w);
  GradValue s = scalar(b, OpId::kMulScalar, batch_dot(b, q, k, false, true), d.scale);
  if (d.causal) s = grad_ops::add(b, s, grad_ops::unary(b, OpId::kLog, causal_mask(b, d.tq, d.tk, w)));
  GradValue m = b.op(OpId::kMax, {s}, OpAttrs::make(ReduceAttrs{.axis = IntTuple{-1}, .keepdims = true}));
  GradValue e = grad_ops::unary(b, OpId::kExp, sub(b, s, m));
  GradValue z = grad_ops::sum(b, e, {-1}, true);
  GradValue lse = grad_ops::reshape_to(b, grad_ops::add(b, m, grad_ops::unary(b, OpId::kLog, z)), lse_shape(qt.shape));
  GradValue out = batch_dot(b, grad_ops::div(b, e, z), v, false, false);
  return {cast_to(b, out, qt.dtype), lse};
}

std::vector<GradValue> decompose_attention_backward(GradBuilder& b, std::span<const GradValue> inputs,
                                                    const OpAttrs& attrs) {
  const DType t = b.type(inputs[2]).dtype, w = lse_dtype(t);
  const AttentionDims d =
      attention_dims(attrs.as<AttentionAttrs>(), b.type(inputs[2]).shape, b.type(inputs[3]).shape,
                     b.type(inputs[4]).shape);
  std::vector<GradValue> in(inputs.begin(), inputs.end());
  for (GradValue& x : in) x = cast_to(b, x, w);
  std::vector<GradValue> r = attention_backward_math(b, d, in);
  for (GradValue& x : r) x = cast_to(b, x, t);
  return r;
}

void register_attention_ops(OpRegistry& r) {
  OpDef& fwd = r.define(OpId::kAttention, "Scaled dot-product attention softmax(q k^T scale) v, and its logsumexp.");
  fwd.num_inputs = 3;
  fwd.input_names = {"query", "key", "value"};
  fwd.infer = infer_attention;
  fwd.parse_attrs = parse_attrs_as<AttentionAttrs>;
  fwd.grad = grad_attention;
  fwd.grad_uses_outputs = true;

  OpDef& back = r.define(OpId::kAttentionBackward, "Gradient of _kiln_attention with respect to q, k, v.");
  back.num_inputs = 7;
  back.input_names = {"out_grad", "lse_grad", "query", "key", "value", "out", "lse"};
  back.infer = infer_attention_backward;
  back.parse_attrs = parse_attrs_as<AttentionAttrs>;
  back.grad = grad_attention_backward;
  back.amp_float32_inputs = (1u << 1) | (1u << 6);  // dlse and lse are float32 whatever the data's dtype
}

}  // namespace kiln
