#include "ir/ops/reduce.h"

#include "ir/grad.h"
#include "ir/grad_ops.h"
#include "ir/op.h"
#include "ir/ops/elemwise.h"
#include "ir/ops/init.h"
#include "ir/ops/matrix.h"

namespace kiln {

uint32_t reduce_axes_mask(const Shape& in, const std::optional<IntTuple>& axis, bool exclude) {
  const int ndim = in.ndim();
  const uint32_t all = ndim == 0 ? 0u : (~0u >> (32 - ndim));
  if (!axis || axis->empty()) return all;
  uint32_t mask = 0;
  for (int64_t a : *axis) {
    KILN_CHECK(a >= -ndim && a < ndim, IndexError,
               "axis {} is out of range for an array with {} axes (expected {}..{})", a, ndim, -ndim, ndim - 1);
    int i = static_cast<int>(a < 0 ? a + ndim : a);
    KILN_CHECK(!(mask & (1u << i)), ValueError, "axis {} appears more than once in axis={}", i, print_attr(*axis));
    mask |= 1u << i;
  }
  return exclude ? (all & ~mask) : mask;
}

Shape reduced_shape(const Shape& in, uint32_t mask, bool keepdims) {
  Shape out;
  for (int i = 0; i < in.ndim(); ++i) {
    if (!(mask & (1u << i)))
      out.push_back(in[i]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

int64_t reduce_count(const Shape& in, uint32_t mask) {
  int64_t n = 1;
  for (int i = 0; i < in.ndim(); ++i)
    if (mask & (1u << i)) n *= in[i];
  return n;
}

namespace {

// Which dtypes each op accepts: floats everywhere; ints where the result is
// exact or an index.
bool accepts(OpId op, DType t) {
  if (is_floating(t)) return true;  // 16-bit floats accumulate in float32
  if (t != DType::kInt32 && t != DType::kInt64) return false;
  return op != OpId::kMean && op != OpId::kNorm;
}

void check_dtype(OpId op, DType t) {
  KILN_CHECK(accepts(op, t), TypeError, "expected float32, float64, float16, bfloat16{}, got {}",
             (op == OpId::kMean || op == OpId::kNorm) ? "" : ", int32 or int64", t);
}

// mean, max, min, argmax and argmin of nothing have no value.
void check_not_empty(OpId op, const Shape& in, uint32_t mask, const Shape& out) {
  bool needs_values = op != OpId::kSum && op != OpId::kProd && op != OpId::kNorm;
  KILN_CHECK(!needs_values || reduce_count(in, mask) > 0 || out.size() == 0, ValueError,
             "cannot reduce over an empty axis (input shape {}, reduced axes of size 0): the result has no value", in);
}

template <OpId kOp>
void infer_reduce(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<ReduceAttrs>();
  check_dtype(kOp, in[0].dtype);
  uint32_t mask = reduce_axes_mask(in[0].shape, a.axis, a.exclude);
  Shape shape = reduced_shape(in[0].shape, mask, a.keepdims);
  check_not_empty(kOp, in[0].shape, mask, shape);
  out.push_back({shape, in[0].dtype});
}

template <OpId kOp>
void infer_arg_reduce(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<ArgReduceAttrs>();
  check_dtype(kOp, in[0].dtype);
  std::optional<IntTuple> axis;
  if (a.axis) axis = IntTuple{*a.axis};
  uint32_t mask = reduce_axes_mask(in[0].shape, axis, false);
  Shape shape = reduced_shape(in[0].shape, mask, a.keepdims);
  check_not_empty(kOp, in[0].shape, mask, shape);
  // 16-bit floats cannot hold every index (bfloat16 is exact to 256 only).
  const bool half = in[0].dtype == DType::kFloat16 || in[0].dtype == DType::kBfloat16;
  out.push_back({shape, half ? DType::kFloat32 : in[0].dtype});
}

void infer_norm(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<NormAttrs>();
  check_dtype(OpId::kNorm, in[0].dtype);
  KILN_CHECK(a.ord == 1 || a.ord == 2, ValueError, "ord must be 1 or 2, got {}", a.ord);
  KILN_CHECK(!a.out_dtype || *a.out_dtype == in[0].dtype, NotSupported,
             "out_dtype={} differs from the input dtype {}; cast the input instead", *a.out_dtype, in[0].dtype);
  uint32_t mask = reduce_axes_mask(in[0].shape, a.axis, false);
  out.push_back({reduced_shape(in[0].shape, mask, a.keepdims), in[0].dtype});
}

// ---- gradients: the output gradient spread back over the reduced axes,
// times what each element contributed.

using grad_ops::reshape_to;

// `v` shaped like the reduction's output, broadcast back to the input's shape.
GradValue spread(GradBuilder& b, GradValue v, const Shape& in, uint32_t mask) {
  GradValue kept = reshape_to(b, v, reduced_shape(in, mask, true));
  if (in.size() == 0) return kept;  // reshape_to gave zeros of `in`'s shape
  BroadcastToAttrs a;
  a.shape = in;
  return b.op(OpId::kBroadcastTo, {kept}, OpAttrs::make(a));
}

template <OpId kOp>
void grad_reduce(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;
  // Sum and mean keep only the input's type: g.inputs is empty for them.
  const GradValue x = g.inputs.empty() ? GradValue{} : g.inputs[0];
  const Shape in = g.input_types[0].shape;
  uint32_t mask = 0;
  if constexpr (kOp == OpId::kNorm) {
    mask = reduce_axes_mask(in, g.attrs.as<NormAttrs>().axis, false);
  } else {
    const auto& a = g.attrs.as<ReduceAttrs>();
    mask = reduce_axes_mask(in, a.axis, a.exclude);
  }
  GradValue dy = spread(b, g.out_grads[0], in, mask);
  auto mul = [&](GradValue l, GradValue r) { return b.op(OpId::kElemwiseMul, {l, r}); };
  auto div = [&](GradValue l, GradValue r) { return b.op(OpId::kElemwiseDiv, {l, r}); };
  auto scalar = [&](OpId op, GradValue v, double s) { return b.op(op, {v}, OpAttrs::make(ScalarAttrs{.scalar = s})); };
  if constexpr (kOp == OpId::kSum) {
    in_grads[0] = dy;
  } else if constexpr (kOp == OpId::kMean) {
    int64_t n = reduce_count(in, mask);
    in_grads[0] = n == 0 ? dy : scalar(OpId::kMulScalar, dy, 1.0 / static_cast<double>(n));
  } else if constexpr (kOp == OpId::kMax || kOp == OpId::kMin) {
    // Every element equal to the extremum receives the gradient (MXNet's rule).
    GradValue hit = b.op(OpId::kBroadcastEqual, {x, reshape_to(b, g.outputs[0], reduced_shape(in, mask, true))});
    in_grads[0] = mul(hit, dy);
  } else if constexpr (kOp == OpId::kProd) {
    in_grads[0] = mul(dy, div(spread(b, g.outputs[0], in, mask), x));  // y / x (MXNet's rule)
  } else if constexpr (kOp == OpId::kNorm) {
    if (g.attrs.as<NormAttrs>().ord == 1) {
      GradValue sign =
          b.op(OpId::kElemwiseSub, {scalar(OpId::kGreaterScalar, x, 0), scalar(OpId::kLesserScalar, x, 0)});
      in_grads[0] = mul(dy, sign);
    } else {
      in_grads[0] = mul(dy, div(x, spread(b, g.outputs[0], in, mask)));
    }
  }
}

OpDef& define_unary(OpRegistry& r, OpId id, std::string_view doc) {
  OpDef& d = r.define(id, doc);
  d.num_inputs = 1;
  d.input_names = {"data"};
  return d;
}

void define_reduce(OpRegistry& r, OpId id, std::string_view doc, InferFn infer, GradFn grad, bool grad_uses_outputs) {
  OpDef& d = define_unary(r, id, doc);
  d.infer = infer;
  d.parse_attrs = parse_attrs_as<ReduceAttrs>;
  d.grad = grad;
  // Sum and mean read only the input's shape (GradArgs::input_types): the tape
  // need not keep an activation alive for them.
  d.grad_uses_inputs = id != OpId::kSum && id != OpId::kMean;
  d.grad_uses_outputs = grad_uses_outputs;
}

void define_arg_reduce(OpRegistry& r, OpId id, std::string_view doc, InferFn infer) {
  OpDef& d = define_unary(r, id, doc);
  d.infer = infer;
  d.parse_attrs = parse_attrs_as<ArgReduceAttrs>;
  d.differentiable = false;
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  define_reduce(r, OpId::kSum, "Sum of the elements over the given axes.", infer_reduce<OpId::kSum>,
                grad_reduce<OpId::kSum>, false);
  define_reduce(r, OpId::kMean, "Mean of the elements over the given axes.", infer_reduce<OpId::kMean>,
                grad_reduce<OpId::kMean>, false);
  define_reduce(r, OpId::kMax, "Maximum of the elements over the given axes (NaN propagates).",
                infer_reduce<OpId::kMax>, grad_reduce<OpId::kMax>, true);
  define_reduce(r, OpId::kMin, "Minimum of the elements over the given axes (NaN propagates).",
                infer_reduce<OpId::kMin>, grad_reduce<OpId::kMin>, true);
  define_reduce(r, OpId::kProd, "Product of the elements over the given axes.", infer_reduce<OpId::kProd>,
                grad_reduce<OpId::kProd>, true);
  define_arg_reduce(r, OpId::kArgmax,
                    "Index of the first maximum along an axis, in the input's dtype (float32 for 16-bit floats).",
                    infer_arg_reduce<OpId::kArgmax>);
  define_arg_reduce(r, OpId::kArgmin,
                    "Index of the first minimum along an axis, in the input's dtype (float32 for 16-bit floats).",
                    infer_arg_reduce<OpId::kArgmin>);
  OpDef& norm = define_unary(r, OpId::kNorm, "L1 or L2 norm of the elements over the given axes.");
  norm.infer = infer_norm;
  norm.parse_attrs = parse_attrs_as<NormAttrs>;
  norm.grad = grad_reduce<OpId::kNorm>;
  norm.grad_uses_outputs = true;

  r.alias("sum_axis", OpId::kSum);
  r.alias("max_axis", OpId::kMax);
  r.alias("min_axis", OpId::kMin);
}

}  // namespace kiln
