#include "ir/ops/linalg.h"

#include "ir/grad.h"
#include "ir/grad_ops.h"
#include "ir/op.h"
#include "ir/ops/init.h"
#include "ir/ops/matrix.h"

namespace kiln {

namespace {

std::string describe(const Shape& a, const Shape& b, const DotAttrs& attrs) {
  return fmt::format("lhs {} (transpose_a={}) and rhs {} (transpose_b={})", a, print_attr(attrs.transpose_a), b,
                     print_attr(attrs.transpose_b));
}

int64_t product(const Shape& s, int begin, int end) {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= s[i];
  return n;
}

}  // namespace

MatmulDims dot_dims(const Shape& a, const Shape& b, const DotAttrs& attrs) {
  KILN_CHECK(a.ndim() > 0 && b.ndim() > 0, ShapeError, "scalars are not accepted: {}", describe(a, b, attrs));
  MatmulDims d;
  if (a.ndim() == 1 && b.ndim() == 1) {
    KILN_CHECK(!attrs.transpose_a && !attrs.transpose_b, ValueError, "cannot transpose vectors: {}",
               describe(a, b, attrs));
    KILN_CHECK(a[0] == b[0], ShapeError, "vector lengths differ: {}", describe(a, b, attrs));
    d.k = a[0];
    return d;  // scalar output
  }
  int64_t ka = 0, kb = 0;
  // A 1-D operand is the same memory as a row or a column: its transpose flag is moot.
  if (a.ndim() == 1) {
    ka = a[0];
  } else if (attrs.transpose_a) {
    ka = a[0];
    d.m = product(a, 1, a.ndim());
    d.ta = true;
    for (int i = 1; i < a.ndim(); ++i) d.out.push_back(a[i]);
  } else {
    ka = a[a.ndim() - 1];
    d.m = product(a, 0, a.ndim() - 1);
    for (int i = 0; i < a.ndim() - 1; ++i) d.out.push_back(a[i]);
  }
  if (b.ndim() == 1) {
    kb = b[0];
  } else if (attrs.transpose_b) {
    kb = b[b.ndim() - 1];
    d.n = product(b, 0, b.ndim() - 1);
    d.tb = true;
    for (int i = 0; i < b.ndim() - 1; ++i) d.out.push_back(b[i]);
  } else {
    kb = b[0];
    d.n = product(b, 1, b.ndim());
    for (int i = 1; i < b.ndim(); ++i) d.out.push_back(b[i]);
  }
  KILN_CHECK(ka == kb, ShapeError, "{} contract axes of different lengths ({} vs {})", describe(a, b, attrs), ka, kb);
  d.k = ka;
  return d;
}

MatmulDims batch_dot_dims(const Shape& a, const Shape& b, const DotAttrs& attrs) {
  const int nd = a.ndim();
  KILN_CHECK(nd >= 3 && b.ndim() == nd, ShapeError,
             "expected two arrays with the same number of axes (at least 3), got {}", describe(a, b, attrs));
  MatmulDims d;
  for (int i = 0; i < nd - 2; ++i) {
    KILN_CHECK(a[i] == b[i], ShapeError, "batch axis {} differs ({} vs {}): {}", i, a[i], b[i], describe(a, b, attrs));
    d.out.push_back(a[i]);
  }
  d.batch = product(a, 0, nd - 2);
  d.ta = attrs.transpose_a;
  d.tb = attrs.transpose_b;
  d.m = d.ta ? a[nd - 1] : a[nd - 2];
  int64_t ka = d.ta ? a[nd - 2] : a[nd - 1];
  d.n = d.tb ? b[nd - 2] : b[nd - 1];
  int64_t kb = d.tb ? b[nd - 1] : b[nd - 2];
  KILN_CHECK(ka == kb, ShapeError, "{} contract axes of different lengths ({} vs {})", describe(a, b, attrs), ka, kb);
  d.k = ka;
  d.out.push_back(d.m);
  d.out.push_back(d.n);
  return d;
}

namespace {

void check_operands(std::span<const TensorType> in, const DotAttrs& attrs) {
  DType t = in[0].dtype;
  KILN_CHECK(in[1].dtype == t, TypeError, "lhs is {} but rhs is {}; cast one of them", t, in[1].dtype);
  KILN_CHECK(is_floating(t) || t == DType::kInt32 || t == DType::kInt64, TypeError,
             "expected float32, float64, float16, bfloat16, int32 or int64 operands, got {}", t);
  KILN_CHECK(!attrs.forward_stype || *attrs.forward_stype == "default", NotSupported,
             "forward_stype='{}': sparse storage is not supported", *attrs.forward_stype);
}

void infer_dot(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<DotAttrs>();
  check_operands(in, a);
  out.push_back({dot_dims(in[0].shape, in[1].shape, a).out, in[0].dtype});
}

void infer_batch_dot(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<DotAttrs>();
  check_operands(in, a);
  out.push_back({batch_dot_dims(in[0].shape, in[1].shape, a).out, in[0].dtype});
}

// ---- gradients. For C = op(A) op(B) with the operands as stored (A [m,k]
// or, transposed, [k,m]; B [k,n] or [n,k]), each gradient is one more
// product of the stored operands: dA = dC B^T, B dC^T, dC B or B^T dC^T and
// dB = A^T dC, A dC, dC^T A or dC^T A^T for (ta, tb) = (F,F), (T,F), (F,T), (T,T).

using grad_ops::reshape_to;

// Fills in_grads for `op` (dot or batch_dot) of stored operands a, b and output gradient dc.
void product_grads(GradBuilder& g, OpId op, GradValue a, GradValue b, GradValue dc, bool ta, bool tb,
                   std::span<const bool> needs, GradValue* da, GradValue* db) {
  auto mm = [&](GradValue x, GradValue y, bool tx, bool ty) {
    return g.op(op, {x, y}, OpAttrs::make(DotAttrs{.transpose_a = tx, .transpose_b = ty}));
  };
  if (needs[0]) *da = ta ? mm(b, dc, tb, true) : mm(dc, b, false, !tb);
  if (needs[1]) *db = tb ? mm(dc, a, true, ta) : mm(a, dc, !ta, false);
}

// dot flattens its operands to matrices: differentiate the matrix product and
// give the gradients the operands' shapes.
void grad_dot(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  const Shape as = b.type(g.inputs[0]).shape, bs = b.type(g.inputs[1]).shape;
  MatmulDims d = dot_dims(as, bs, g.attrs.as<DotAttrs>());
  GradValue a2 = reshape_to(b, g.inputs[0], d.ta ? Shape{d.k, d.m} : Shape{d.m, d.k});
  GradValue b2 = reshape_to(b, g.inputs[1], d.tb ? Shape{d.n, d.k} : Shape{d.k, d.n});
  GradValue dc = reshape_to(b, g.out_grads[0], Shape{d.m, d.n});
  GradValue da, db;
  product_grads(b, OpId::kDot, a2, b2, dc, d.ta, d.tb, g.needs_grad, &da, &db);
  if (g.needs_grad[0]) in_grads[0] = reshape_to(b, da, as);
  if (g.needs_grad[1]) in_grads[1] = reshape_to(b, db, bs);
}

void grad_batch_dot(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  const auto& a = g.attrs.as<DotAttrs>();
  product_grads(b, OpId::kBatchDot, g.inputs[0], g.inputs[1], g.out_grads[0], a.transpose_a, a.transpose_b,
                g.needs_grad, &in_grads[0], &in_grads[1]);
}

void define_product(OpRegistry& r, OpId id, std::string_view doc, InferFn infer, GradFn grad) {
  OpDef& d = r.define(id, doc);
  d.num_inputs = 2;
  d.input_names = {"lhs", "rhs"};
  d.infer = infer;
  d.parse_attrs = parse_attrs_as<DotAttrs>;
  d.grad = grad;
  d.grad_uses_inputs = true;
  d.grad_uses_outputs = false;
}

}  // namespace

void register_linalg_ops(OpRegistry& r) {
  define_product(r, OpId::kDot, "Matrix product of the flattened operands (MXNet's dot).", infer_dot, grad_dot);
  define_product(r, OpId::kBatchDot, "Matrix products of the last two axes, batched over the leading ones.",
                 infer_batch_dot, grad_batch_dot);
}

}  // namespace kiln
