// Ops that can also run as a composition of other ops: where a device has no
// kernel for such an op (a fused op written for the CPU, run on a GPU), Kiln
// runs its decomposition instead, imperatively (invoke) and in compiled graphs
// (the `decompose` pass), so a model holding the op still runs there.
//
//   if (DecomposeFn fn = decomposition(OpId::kAttention))
//     std::vector<GradValue> outs = fn(builder, inputs, attrs);   // out, lse
//
// A DecomposeFn emits ordinary ops through a GradBuilder (ir/grad.h): the same
// builders that run gradients eagerly or append them to a graph. It returns
// one value per output of the op, with the types the op's inference gives;
// the values agree with the op's kernel to rounding (each decomposition says
// how it computes). The math of each decomposition lives beside its op in
// ir/ops/<family>.cc; this header is the table of them.
//
// KILN_DECOMPOSE=name,name (MXNet op names, or "all") makes those ops run as
// their decompositions on every device: to compare a fused kernel with its
// reference, or to run around a suspect kernel.
#pragma once

#include <span>
#include <vector>

#include "ir/attrs.h"
#include "ir/grad.h"
#include "ir/op.h"

namespace kiln {

using DecomposeFn = std::vector<GradValue> (*)(GradBuilder& b, std::span<const GradValue> inputs,
                                               const OpAttrs& attrs);

// The decomposition of `op`, or nullptr when it has none.
DecomposeFn decomposition(OpId op);

// Whether KILN_DECOMPOSE names `op` (read once per process).
bool decomposition_forced(OpId op);

}  // namespace kiln
