#include "ir/ops/matrix.h"

#include <algorithm>
#include <charconv>

#include "ir/grad.h"
#include "ir/grad_ops.h"
#include "ir/op.h"
#include "ir/ops/init.h"
#include "ir/ops/reduce.h"

namespace kiln {

// ---- attribute codecs

OptIntTuple parse_attr(std::string_view s, OptIntTuple*) {
  OptIntTuple out;
  auto is_space = [](char c) { return c == ' ' || c == '\'' || c == '"' || c == 'L'; };
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '(' || s[i] == '[')) ++i;
  size_t stop = s.size();
  while (stop > i && (s[stop - 1] == ' ' || s[stop - 1] == ')' || s[stop - 1] == ']')) --stop;
  std::string_view body = s.substr(i, stop - i);
  while (!body.empty()) {
    size_t comma = body.find(',');
    std::string_view item = body.substr(0, comma);
    body = comma == std::string_view::npos ? std::string_view() : body.substr(comma + 1);
    while (!item.empty() && is_space(item.front())) item.remove_prefix(1);
    while (!item.empty() && is_space(item.back())) item.remove_suffix(1);
    if (item.empty()) {
      // "(3,)": the trailing comma of a one-element tuple
      KILN_CHECK(body.empty(), ValueError, "expected a tuple of integers or None, found '{}'", s);
      break;
    }
    if (item == "None") {
      out.v.push_back(std::nullopt);
      continue;
    }
    int64_t value = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    KILN_CHECK(ec == std::errc() && p == item.data() + item.size(), ValueError,
               "expected a tuple of integers or None, found '{}'", s);
    out.v.push_back(value);
  }
  return out;
}

std::string print_attr(const OptIntTuple& t) {
  std::string s = "(";
  for (size_t i = 0; i < t.size(); ++i) {
    if (i) s += ", ";
    s += t[i] ? std::to_string(*t[i]) : std::string("None");
  }
  if (t.size() == 1) s += ",";
  return s + ")";
}

TakeMode parse_attr(std::string_view s, TakeMode*) {
  std::string m = parse_attr(s, static_cast<std::string*>(nullptr));
  if (m == "clip") return TakeMode::kClip;
  if (m == "wrap") return TakeMode::kWrap;
  if (m == "raise") return TakeMode::kRaise;
  throw ValueError(fmt::format("expected 'clip', 'wrap' or 'raise', found '{}'", m));
}

std::string print_attr(TakeMode v) {
  switch (v) {
    case TakeMode::kClip:
      return "clip";
    case TakeMode::kWrap:
      return "wrap";
    case TakeMode::kRaise:
      return "raise";
  }
  return "clip";
}

// ---- shape rules

Shape infer_reshape(const Shape& in, const IntTuple& spec, bool reverse) {
  // Group the spec into tokens (-4 owns the two values after it), so that
  // reverse mode can walk tokens and input dims from the right.
  struct Token {
    int64_t code;
    int64_t d1 = 0, d2 = 0;  // -4 only
  };
  std::vector<Token> tokens;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t c = spec[i];
    KILN_CHECK(c >= -4, ValueError, "Reshape: invalid value {} in shape {} (allowed: d >= 0, -1, -2, -3, -4)", c,
               print_attr(spec));
    if (c != -4) {
      tokens.push_back({c});
      continue;
    }
    KILN_CHECK(i + 2 < spec.size(), ValueError, "Reshape: -4 in shape {} must be followed by two values",
               print_attr(spec));
    Token t{c, spec[i + 1], spec[i + 2]};
    KILN_CHECK(t.d1 >= -1 && t.d2 >= -1 && !(t.d1 == -1 && t.d2 == -1), ValueError,
               "Reshape: -4 in shape {} is followed by {}, {}: expected dims or one -1", print_attr(spec), t.d1, t.d2);
    if (reverse) std::swap(t.d1, t.d2);  // the output is reversed at the end
    tokens.push_back(t);
    i += 2;
  }
  std::vector<int64_t> src = in.to_vector();
  if (reverse) {
    std::reverse(tokens.begin(), tokens.end());
    std::reverse(src.begin(), src.end());
  }

  auto mismatch = [&](std::string_view why) {
    return ShapeError(fmt::format("cannot reshape {} with shape={}{}: {}", in, print_attr(spec),
                                  reverse ? " reverse=True" : "", why));
  };
  std::vector<int64_t> out;
  size_t s = 0;  // next input dim
  int inferred = -1;
  for (const Token& t : tokens) {
    switch (t.code) {
      case 0:
        if (s >= src.size()) throw mismatch("0 refers to an input dim that does not exist");
        out.push_back(src[s++]);
        break;
      case -1:
        KILN_CHECK(inferred < 0, ValueError, "Reshape: shape {} has more than one -1", print_attr(spec));
        inferred = static_cast<int>(out.size());
        out.push_back(1);
        ++s;
        break;
      case -2:
        while (s < src.size()) out.push_back(src[s++]);
        break;
      case -3:
        if (s + 1 >= src.size()) throw mismatch("-3 needs two more input dims");
        out.push_back(src[s] * src[s + 1]);
        s += 2;
        break;
      case -4: {
        if (s >= src.size()) throw mismatch("-4 refers to an input dim that does not exist");
        int64_t d0 = src[s++], d1 = t.d1, d2 = t.d2;
        if (d1 == -1 && d2 > 0 && d0 % d2 == 0) d1 = d0 / d2;
        if (d2 == -1 && d1 > 0 && d0 % d1 == 0) d2 = d0 / d1;
        if (d1 < 0 || d2 < 0 || d1 * d2 != d0)
          throw mismatch(fmt::format("-4 cannot split dim {} into {} and {}", d0, t.d1, t.d2));
        out.push_back(d1);
        out.push_back(d2);
        break;
      }
      default:
        out.push_back(t.code);
        ++s;
        break;
    }
  }
  if (inferred >= 0) {
    int64_t known = 1;
    bool overflow = false;
    for (int64_t d : out) overflow = overflow || __builtin_mul_overflow(known, d, &known);
    if (overflow) throw mismatch("the product of the other dims overflows 64 bits");
    if (known == 0 || in.size() % known != 0)
      throw mismatch(fmt::format("size {} is not a multiple of {}, the product of the other dims", in.size(), known));
    out[inferred] = in.size() / known;
  }
  if (reverse) std::reverse(out.begin(), out.end());
  KILN_CHECK(out.size() <= static_cast<size_t>(Shape::kMaxNdim), ShapeError,
             "cannot reshape {} with shape={}: the result has {} axes; Kiln supports at most {}", in, print_attr(spec),
             out.size(), Shape::kMaxNdim);
  Shape result(out);
  if (result.size() != in.size())
    throw mismatch(fmt::format("the result {} has {} elements, the input has {}", result, result.size(), in.size()));
  return result;
}

SliceRange slice_range(int64_t len, std::optional<int64_t> begin, std::optional<int64_t> end,
                       std::optional<int64_t> step) {
  int64_t st = step.value_or(1);
  KILN_CHECK(st != 0, ValueError, "slice step must not be 0");
  // Clamp like Python: into [0, len] for positive steps, [-1, len-1] for negative.
  int64_t lo = st > 0 ? 0 : -1, hi = st > 0 ? len : len - 1;
  auto bound = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + len : *v;
    return std::clamp(x, lo, hi);
  };
  int64_t b = bound(begin, st > 0 ? 0 : len - 1);
  int64_t e = bound(end, st > 0 ? len : -1);
  int64_t n = st > 0 ? (e - b + st - 1) / st : (b - e - st - 1) / -st;
  return {b, st, std::max<int64_t>(n, 0)};
}

std::vector<int> transpose_axes(const IntTuple& axes, int ndim) {
  std::vector<int> perm(ndim);
  if (axes.empty()) {
    for (int i = 0; i < ndim; ++i) perm[i] = ndim - 1 - i;
    return perm;
  }
  KILN_CHECK(static_cast<int>(axes.size()) == ndim, ValueError,
             "axes={} has {} entries; expected one per input axis ({})", print_attr(axes), axes.size(), ndim);
  std::vector<bool> seen(ndim, false);
  for (int i = 0; i < ndim; ++i) {
    perm[i] = normalize_axis(static_cast<int>(axes[i]), ndim, "transpose");
    KILN_CHECK(!seen[perm[i]], ValueError, "axes={} repeats axis {}", print_attr(axes), perm[i]);
    seen[perm[i]] = true;
  }
  return perm;
}

namespace {

// ---- inference, one function per op

const TensorType& only(std::span<const TensorType> in) { return in[0]; }

void infer_reshape_op(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<ReshapeAttrs>();
  const Shape& ishape = only(in).shape;
  if (!a.shape.empty() || a.target_shape.ndim() == 0) {
    out.push_back({infer_reshape(ishape, a.shape, a.reverse), in[0].dtype});
    return;
  }
  // Deprecated target_shape: 0 entries (after a kept highest dim) are inferred.
  Shape t = a.target_shape;
  if (a.keep_highest) {
    KILN_CHECK(ishape.ndim() >= 1, ShapeError, "keep_highest needs an input with at least one axis");
    t[0] = ishape[0];
  }
  IntTuple spec = t.to_vector();
  for (size_t i = a.keep_highest ? 1 : 0; i < spec.size(); ++i)
    if (spec[i] == 0) spec[i] = -1;
  // Positive entries reference no input dims, so only the -1 is special.
  out.push_back({infer_reshape(ishape, spec, false), in[0].dtype});
}

void infer_transpose(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const Shape& s = only(in).shape;
  std::vector<int> perm = transpose_axes(attrs.as<TransposeAttrs>().axes, s.ndim());
  Shape o;
  for (int p : perm) o.push_back(s[p]);
  out.push_back({o, in[0].dtype});
}

void infer_slice(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<SliceAttrs>();
  Shape o = only(in).shape;
  KILN_CHECK(a.begin.size() <= static_cast<size_t>(o.ndim()), IndexError,
             "begin={} has {} entries but the input {} has {} axes", print_attr(a.begin), a.begin.size(), o, o.ndim());
  KILN_CHECK(a.end.size() == a.begin.size(), ValueError, "begin={} and end={} differ in length", print_attr(a.begin),
             print_attr(a.end));
  KILN_CHECK(a.step.empty() || a.step.size() == a.begin.size(), ValueError,
             "step={} must be empty or as long as begin={}", print_attr(a.step), print_attr(a.begin));
  for (size_t i = 0; i < a.begin.size(); ++i) {
    auto step = a.step.empty() ? std::nullopt : a.step[i];
    KILN_CHECK(step.value_or(1) != 0, ValueError, "step={} is 0 for axis {}", print_attr(a.step), i);
    o[static_cast<int>(i)] = slice_range(o[static_cast<int>(i)], a.begin[i], a.end[i], step).length;
  }
  out.push_back({o, in[0].dtype});
}

void infer_slice_axis(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<SliceAxisAttrs>();
  Shape o = only(in).shape;
  int axis = normalize_axis(a.axis, o.ndim(), "slice_axis");
  o[axis] = slice_range(o[axis], a.begin, a.end, 1).length;
  out.push_back({o, in[0].dtype});
}

// Checks the variadic count and that every input has input 0's dtype, ndim,
// and dims except `skip_axis` (-1: all dims must match).
void check_joined_inputs(std::span<const TensorType> in, int num_args, int skip_axis) {
  KILN_CHECK(num_args >= 1 && static_cast<int>(in.size()) == num_args, ValueError,
             "num_args={} but {} inputs were given", num_args, in.size());
  const TensorType& first = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    KILN_CHECK(in[i].dtype == first.dtype, TypeError, "input {} has dtype {} but input 0 has dtype {}", i, in[i].dtype,
               first.dtype);
    bool same = in[i].shape.ndim() == first.shape.ndim();
    for (int d = 0; same && d < first.shape.ndim(); ++d) same = d == skip_axis || in[i].shape[d] == first.shape[d];
    if (skip_axis < 0) {
      KILN_CHECK(same, ShapeError, "input {} has shape {} but input 0 has shape {}; all shapes must be equal", i,
                 in[i].shape, first.shape);
    } else {
      KILN_CHECK(same, ShapeError, "input {} has shape {} but input 0 has shape {}; all axes except {} must match", i,
                 in[i].shape, first.shape, skip_axis);
    }
  }
}

void infer_concat(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<ConcatAttrs>();
  KILN_CHECK(!in.empty(), ValueError, "needs at least one input");
  int axis = normalize_axis(a.dim, in[0].shape.ndim(), "Concat");
  check_joined_inputs(in, a.num_args, axis);
  Shape o = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i) o[axis] += in[i].shape[axis];
  out.push_back({o, in[0].dtype});
}

void infer_stack(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<StackAttrs>();
  KILN_CHECK(!in.empty(), ValueError, "needs at least one input");
  const Shape& s = in[0].shape;
  int axis = normalize_axis(a.axis, s.ndim() + 1, "stack");
  check_joined_inputs(in, a.num_args, -1);
  Shape o;
  for (int d = 0; d <= s.ndim(); ++d) {
    if (d == axis) o.push_back(static_cast<int64_t>(in.size()));
    if (d < s.ndim()) o.push_back(s[d]);
  }
  out.push_back({o, in[0].dtype});
}

void infer_split(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<SplitAttrs>();
  const Shape& s = only(in).shape;
  int axis = normalize_axis(a.axis, s.ndim(), "SliceChannel");
  KILN_CHECK(a.num_outputs >= 1, ValueError, "num_outputs must be >= 1, got {}", a.num_outputs);
  KILN_CHECK(s[axis] % a.num_outputs == 0, ValueError, "axis {} of length {} cannot be split into {} equal parts", axis,
             s[axis], a.num_outputs);
  int64_t part = s[axis] / a.num_outputs;
  Shape o;
  for (int d = 0; d < s.ndim(); ++d) {
    if (d != axis) {
      o.push_back(s[d]);
    } else if (!a.squeeze_axis) {
      o.push_back(part);
    } else {
      KILN_CHECK(part == 1, ValueError,
                 "squeeze_axis=True needs parts of length 1, but axis {} of length {} splits into parts of {}", axis,
                 s[axis], part);
    }
  }
  out.assign(static_cast<size_t>(a.num_outputs), TensorType{o, in[0].dtype});
}

void infer_take(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<TakeAttrs>();
  const Shape& s = in[0].shape;
  KILN_CHECK(s.ndim() >= 1, ShapeError, "cannot take from a scalar");
  int axis = normalize_axis(a.axis, s.ndim(), "take");
  KILN_CHECK(s[axis] > 0 || in[1].shape.size() == 0, IndexError, "cannot take indices from axis {} of length 0", axis);
  KILN_CHECK(s.ndim() - 1 + in[1].shape.ndim() <= Shape::kMaxNdim, ShapeError,
             "the result would have {} axes; Kiln supports at most {}", s.ndim() - 1 + in[1].shape.ndim(),
             Shape::kMaxNdim);
  Shape o;
  for (int d = 0; d < axis; ++d) o.push_back(s[d]);
  for (int64_t d : in[1].shape) o.push_back(d);
  for (int d = axis + 1; d < s.ndim(); ++d) o.push_back(s[d]);
  out.push_back({o, in[0].dtype});
}

void infer_one_hot(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<OneHotAttrs>();
  KILN_CHECK(a.depth >= 0, ValueError, "depth must be >= 0, got {}", a.depth);
  Shape o = only(in).shape;
  KILN_CHECK(o.ndim() < Shape::kMaxNdim, ShapeError, "the result would have {} axes; Kiln supports at most {}",
             o.ndim() + 1, Shape::kMaxNdim);
  o.push_back(a.depth);
  out.push_back({o, a.dtype});
}

void infer_expand_dims(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const Shape& s = only(in).shape;
  int axis = normalize_axis(attrs.as<ExpandDimsAttrs>().axis, s.ndim() + 1, "expand_dims");
  std::vector<int64_t> dims = s.to_vector();
  dims.insert(dims.begin() + axis, 1);
  out.push_back({Shape(dims), in[0].dtype});
}

void infer_broadcast_to(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const Shape& target = attrs.as<BroadcastToAttrs>().shape;
  const Shape& s = only(in).shape;
  KILN_CHECK(s.ndim() <= target.ndim(), ShapeError, "cannot broadcast {} to {}: the target has fewer axes", s, target);
  int lead = target.ndim() - s.ndim();
  Shape o;
  for (int d = 0; d < target.ndim(); ++d) {
    int64_t have = d >= lead ? s[d - lead] : 1;
    int64_t want = target[d] == 0 ? have : target[d];
    KILN_CHECK(have == want || have == 1, ShapeError,
               "cannot broadcast {} to {}: axis {} has length {}, expected 1 or {}", s, target, d, have, want);
    o.push_back(want);
  }
  out.push_back({o, in[0].dtype});
}

// ---- inference of the backward ops: out_grad must be what the forward op
// makes of data_shape; the result is data_shape.

void check_out_grad(const TensorType& out_grad, const TensorType& expected, const Shape& data_shape) {
  KILN_CHECK(out_grad.shape == expected.shape, ShapeError,
             "out_grad has shape {}, but the forward op maps data_shape {} to {}", out_grad.shape, data_shape,
             expected.shape);
}

void infer_slice_backward(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<SliceBackwardAttrs>();
  TensorType data{a.data_shape, in[0].dtype};
  std::vector<TensorType> fwd;
  infer_slice(OpAttrs::make(SliceAttrs{a.begin, a.end, a.step}), {&data, 1}, fwd);
  check_out_grad(in[0], fwd[0], a.data_shape);
  out.push_back(data);
}

void infer_slice_axis_backward(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<SliceAxisBackwardAttrs>();
  TensorType data{a.data_shape, in[0].dtype};
  std::vector<TensorType> fwd;
  infer_slice_axis(OpAttrs::make(SliceAxisAttrs{a.axis, a.begin, a.end}), {&data, 1}, fwd);
  check_out_grad(in[0], fwd[0], a.data_shape);
  out.push_back(data);
}

void infer_take_backward(const OpAttrs& attrs, std::span<const TensorType> in, std::vector<TensorType>& out) {
  const auto& a = attrs.as<TakeBackwardAttrs>();
  DType t = in[0].dtype;
  KILN_CHECK(t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBfloat16, TypeError,
             "out_grad must be float32, float64, float16 or bfloat16, got {}", t);
  TensorType fwd_in[2] = {{a.data_shape, t}, in[1]};
  std::vector<TensorType> fwd;
  infer_take(OpAttrs::make(TakeAttrs{a.axis, a.mode}), fwd_in, fwd);
  check_out_grad(in[0], fwd[0], a.data_shape);
  out.push_back(fwd_in[0]);
}

// ---- gradients: layout ops again, or the backward ops above

using grad_ops::reshape_to;

void grad_reshape(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;
  in_grads[0] = reshape_to(b, g.out_grads[0], g.input_types[0].shape);
}

void grad_expand_dims(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;
  std::vector<int64_t> dims = b.type(g.out_grads[0]).shape.to_vector();
  int axis = normalize_axis(g.attrs.as<ExpandDimsAttrs>().axis, static_cast<int>(dims.size()), "expand_dims");
  dims.erase(dims.begin() + axis);
  in_grads[0] = reshape_to(b, g.out_grads[0], Shape(dims));
}

void grad_transpose(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;
  std::vector<int> perm = transpose_axes(g.attrs.as<TransposeAttrs>().axes, b.type(g.out_grads[0]).shape.ndim());
  TransposeAttrs inverse;
  inverse.axes.resize(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inverse.axes[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
  in_grads[0] = b.op(OpId::kTranspose, {g.out_grads[0]}, OpAttrs::make(inverse));
}

void grad_broadcast_to(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;
  const Shape& s = g.input_types[0].shape;
  // A zero-size input broadcasts to a zero-size output: nothing to sum.
  in_grads[0] = s.size() == 0 ? reshape_to(b, g.out_grads[0], s) : unbroadcast(b, g.out_grads[0], s);
}

void grad_slice(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;
  const auto& a = g.attrs.as<SliceAttrs>();
  SliceBackwardAttrs back{a.begin, a.end, a.step, g.input_types[0].shape};
  in_grads[0] = b.op(OpId::kSliceBackward, {g.out_grads[0]}, OpAttrs::make(back));
}

void grad_slice_axis(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;
  const auto& a = g.attrs.as<SliceAxisAttrs>();
  SliceAxisBackwardAttrs back{a.axis, a.begin, a.end, g.input_types[0].shape};
  in_grads[0] = b.op(OpId::kSliceAxisBackward, {g.out_grads[0]}, OpAttrs::make(back));
}

void grad_concat(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  int ndim = b.type(g.out_grads[0]).shape.ndim();
  int axis = normalize_axis(g.attrs.as<ConcatAttrs>().dim, ndim, "Concat");
  int64_t offset = 0;
  for (size_t i = 0; i < g.input_types.size(); ++i) {
    int64_t len = g.input_types[i].shape[axis];
    if (g.needs_grad[i])
      in_grads[i] = b.op(OpId::kSliceAxis, {g.out_grads[0]}, OpAttrs::make(SliceAxisAttrs{axis, offset, offset + len}));
    offset += len;
  }
}

void grad_stack(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (std::none_of(g.needs_grad.begin(), g.needs_grad.end(), [](bool n) { return n; })) return;
  const auto& a = g.attrs.as<StackAttrs>();
  int axis = normalize_axis(a.axis, b.type(g.out_grads[0]).shape.ndim(), "stack");
  SplitAttrs split{a.num_args, axis, true};
  GradValue dy = g.out_grads[0];
  std::vector<GradValue> parts = b.apply(OpId::kSplit, {&dy, 1}, OpAttrs::make(split));
  for (size_t i = 0; i < in_grads.size(); ++i)
    if (g.needs_grad[i]) in_grads[i] = parts[i];
}

// Concat (or stack, for squeezed parts) of the output gradients; an output
// without one contributes zeros (all parts have one type).
void grad_split(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;
  const auto& a = g.attrs.as<SplitAttrs>();
  auto given = std::find_if(g.out_grads.begin(), g.out_grads.end(), [](GradValue v) { return !v.is_none(); });
  if (given == g.out_grads.end()) return;
  TensorType part = b.type(*given);
  std::vector<GradValue> parts(g.out_grads.begin(), g.out_grads.end());
  for (GradValue& p : parts)
    if (p.is_none()) p = b.op(OpId::kZeros, {}, OpAttrs::make(InitAttrs{part.shape, part.dtype}));
  int ndim = part.shape.ndim() + (a.squeeze_axis ? 1 : 0);
  int axis = normalize_axis(a.axis, ndim, "SliceChannel");
  int n = static_cast<int>(parts.size());
  if (a.squeeze_axis) {
    in_grads[0] = b.apply(OpId::kStack, parts, OpAttrs::make(StackAttrs{axis, n}))[0];
  } else if (n == 1) {
    in_grads[0] = parts[0];
  } else {
    in_grads[0] = b.apply(OpId::kConcat, parts, OpAttrs::make(ConcatAttrs{n, axis}))[0];
  }
}

void grad_take(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;  // indices never get a gradient
  const auto& a = g.attrs.as<TakeAttrs>();
  TakeBackwardAttrs back{a.axis, a.mode, g.input_types[0].shape};
  in_grads[0] = b.op(OpId::kTakeBackward, {g.out_grads[0], g.inputs[1]}, OpAttrs::make(back));
}

// The backward ops are linear in out_grad; their gradient is the forward op.
void grad_slice_backward(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;
  const auto& a = g.attrs.as<SliceBackwardAttrs>();
  in_grads[0] = b.op(OpId::kSlice, {g.out_grads[0]}, OpAttrs::make(SliceAttrs{a.begin, a.end, a.step}));
}

void grad_slice_axis_backward(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;
  const auto& a = g.attrs.as<SliceAxisBackwardAttrs>();
  in_grads[0] = b.op(OpId::kSliceAxis, {g.out_grads[0]}, OpAttrs::make(SliceAxisAttrs{a.axis, a.begin, a.end}));
}

void grad_take_backward(GradBuilder& b, const GradArgs& g, std::span<GradValue> in_grads) {
  if (!g.needs_grad[0]) return;
  const auto& a = g.attrs.as<TakeBackwardAttrs>();
  in_grads[0] = b.op(OpId::kTake, {g.out_grads[0], g.inputs[1]}, OpAttrs::make(TakeAttrs{a.axis, a.mode}));
}

OpDef& define(OpRegistry& r, OpId id, std::string_view doc, std::vector<std::string_view> inputs, InferFn infer,
              ParseAttrsFn parse) {
  OpDef& d = r.define(id, doc);
  d.num_inputs = inputs.empty() ? -1 : static_cast<int>(inputs.size());
  d.input_names = std::move(inputs);
  d.infer = infer;
  d.parse_attrs = parse;
  return d;
}

}  // namespace

// Only take's gradient reads an input's values (its indices; `a` is kept with
// them); the others need at most the input types, which GradArgs always has.
void register_matrix_ops(OpRegistry& r) {
  auto differentiable = [](OpDef& d, GradFn grad, bool uses_inputs) {
    d.grad = grad;
    d.grad_uses_inputs = uses_inputs;
    d.grad_uses_outputs = false;
  };
  differentiable(
      define(r, OpId::kReshape, "Gives the input a new shape with the same elements (MXNet's special values allowed).",
             {"data"}, infer_reshape_op, parse_attrs_as<ReshapeAttrs>),
      grad_reshape, false);
  // Same elements in the same order: a reshape of an array read for the last
  // time takes over its storage (the kernels skip the copy then).
  r.defined(OpId::kReshape).inplace = {{0, 0}};
  differentiable(define(r, OpId::kTranspose, "Permutes the axes (reverses them when axes is empty).", {"data"},
                        infer_transpose, parse_attrs_as<TransposeAttrs>),
                 grad_transpose, false);
  differentiable(define(r, OpId::kSlice, "Takes a strided slice along the leading axes.", {"data"}, infer_slice,
                        parse_attrs_as<SliceAttrs>),
                 grad_slice, false);
  differentiable(define(r, OpId::kSliceAxis, "Takes [begin, end) along one axis.", {"data"}, infer_slice_axis,
                        parse_attrs_as<SliceAxisAttrs>),
                 grad_slice_axis, false);
  differentiable(
      define(r, OpId::kConcat, "Joins arrays along an existing axis.", {}, infer_concat, parse_attrs_as<ConcatAttrs>),
      grad_concat, false);
  differentiable(
      define(r, OpId::kStack, "Joins same-shape arrays along a new axis.", {}, infer_stack, parse_attrs_as<StackAttrs>),
      grad_stack, false);
  differentiable(define(r, OpId::kSplit, "Splits an array into equal parts along an axis.", {"data"}, infer_split,
                        parse_attrs_as<SplitAttrs>),
                 grad_split, false);
  differentiable(define(r, OpId::kTake, "Picks sub-arrays along an axis by index.", {"a", "indices"}, infer_take,
                        parse_attrs_as<TakeAttrs>),
                 grad_take, true);
  define(r, OpId::kOneHot, "One-hot encodes integer indices along a new last axis.", {"indices"}, infer_one_hot,
         parse_attrs_as<OneHotAttrs>)
      .differentiable = false;
  differentiable(define(r, OpId::kExpandDims, "Inserts an axis of length 1.", {"data"}, infer_expand_dims,
                        parse_attrs_as<ExpandDimsAttrs>),
                 grad_expand_dims, false);
  r.defined(OpId::kExpandDims).inplace = {{0, 0}};  // as Reshape
  differentiable(define(r, OpId::kBroadcastTo, "Broadcasts an array to a larger shape.", {"data"}, infer_broadcast_to,
                        parse_attrs_as<BroadcastToAttrs>),
                 grad_broadcast_to, false);
  differentiable(define(r, OpId::kSliceBackward, "Gradient of slice: out_grad placed into zeros of data_shape.",
                        {"out_grad"}, infer_slice_backward, parse_attrs_as<SliceBackwardAttrs>),
                 grad_slice_backward, false);
  differentiable(
      define(r, OpId::kSliceAxisBackward, "Gradient of slice_axis: out_grad placed into zeros of data_shape.",
             {"out_grad"}, infer_slice_axis_backward, parse_attrs_as<SliceAxisBackwardAttrs>),
      grad_slice_axis_backward, false);
  differentiable(
      define(r, OpId::kTakeBackward, "Gradient of take: out_grad added into zeros of data_shape at the picked rows.",
             {"out_grad", "indices"}, infer_take_backward, parse_attrs_as<TakeBackwardAttrs>),
      grad_take_backward, true);
  r.alias("reshape", OpId::kReshape);
  r.alias("concat", OpId::kConcat);
  r.alias("split", OpId::kSplit);
}

}  // namespace kiln
