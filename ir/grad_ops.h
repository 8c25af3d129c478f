// Shorthands that GradFns (ir/grad.h) use to emit common ops, and the
// gradient of a composite: a function written as ordinary ops, differentiated
// by applying each of those ops' GradFns in reverse.
//
//   // d/dy of sum(dy * y) along the softmax axis, kept for broadcasting
//   GradValue s = grad_ops::sum(b, grad_ops::mul(b, dy, y), {axis}, true);
//   GradValue d = grad_ops::sub(b, dy, s);           // broadcast as needed
//
//   // BatchNorm's backward op differentiated through its math in ordinary ops:
//   grad_of_composite(b, args, in_grads, [&](GradBuilder& t, std::span<const GradValue> x) {
//     return std::vector<GradValue>{...};            // ops applied through `t`
//   });
//
// Binary helpers pick the elementwise op when both shapes are equal and the
// broadcast op otherwise; scalar helpers take the ScalarAttrs op id.
#pragma once

#include <functional>
#include <initializer_list>
#include <span>
#include <vector>

#include "ir/grad.h"

namespace kiln::grad_ops {

GradValue add(GradBuilder& b, GradValue x, GradValue y);
GradValue sub(GradBuilder& b, GradValue x, GradValue y);
GradValue mul(GradBuilder& b, GradValue x, GradValue y);
GradValue div(GradBuilder& b, GradValue x, GradValue y);
GradValue neg(GradBuilder& b, GradValue x);
GradValue unary(GradBuilder& b, OpId op, GradValue x);  // exp, square, abs, ...
// `op` is one of the *_scalar ops: op(x, s).
GradValue scalar(GradBuilder& b, OpId op, GradValue x, double s);
// Sum over `axes` (negative counts from the end).
GradValue sum(GradBuilder& b, GradValue x, std::initializer_list<int> axes, bool keepdims);
GradValue sum(GradBuilder& b, GradValue x, const std::vector<int64_t>& axes, bool keepdims);
// `v` reshaped to `s` (v itself when the shapes are equal; zero-size shapes
// that a Reshape spec cannot spell come out as fresh zeros).
GradValue reshape_to(GradBuilder& b, GradValue v, const Shape& s);

}  // namespace kiln::grad_ops

namespace kiln {

// Applies ordinary ops to `inputs` through the given builder and returns the
// composite's outputs (one per forward output of the op being differentiated).
using ComposeFn = std::function<std::vector<GradValue>(GradBuilder& b, std::span<const GradValue> inputs)>;

// The gradient of an op whose value equals `compose(args.inputs)`: runs
// `compose` once, recording the ops it applies, then applies each recorded
// op's GradFn in reverse order, starting from args.out_grads. Every op emitted
// is an ordinary op, so the result can be differentiated again. Needs
// args.inputs (the op's grad_uses_inputs). Fills in_grads[i] where
// args.needs_grad[i]; an input that no recorded op reads gets none. Throws
// NotSupported naming a recorded op that is differentiable but has no GradFn.
void grad_of_composite(GradBuilder& b, const GradArgs& args, std::span<GradValue> in_grads, const ComposeFn& compose);

}  // namespace kiln
