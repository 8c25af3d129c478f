// What passes may assume about an op beyond its inference: whether it has
// effects (writes an input in place) and whether its result depends on more
// than its inputs and attributes (random ops).
//
//   if (passes::is_pure(op_def(n.op))) ...   // safe to merge with an equal node or to drop
#pragma once

#include "ir/op.h"

namespace kiln::passes {

// Writes some input in place (OpDef::mutate_inputs: BatchNorm's running
// statistics, optimizer updates). Such nodes are kept even when their outputs
// are unused, and never merged.
inline bool has_effects(const OpDef& def) { return !def.mutate_inputs.empty(); }

// Draws random numbers (_random_uniform, _random_normal, Dropout): two equal
// calls may give different values.
inline bool is_random(const OpDef& def) {
  return def.id == OpId::kRandomUniform || def.id == OpId::kRandomNormal || def.id == OpId::kDropout;
}

// The outputs depend only on the inputs and attributes and nothing else is
// written: equal calls may be merged, unused calls dropped.
inline bool is_pure(const OpDef& def) { return !has_effects(def) && !is_random(def); }

}  // namespace kiln::passes
