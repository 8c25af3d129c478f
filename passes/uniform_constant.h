// Values known at compile time without a constant table: arrays whose
// elements all hold one number, made by `_zeros`, `_ones` or `_full`.
//
//   if (auto v = passes::uniform_value(g, e); v && *v == 0) ...   // e is all zeros
#pragma once

#include <optional>

#include "ir/graph.h"

namespace kiln::passes {

// The value every element of `e` holds (as stored: rounded to float32 for a
// float32 array), when its producer is `_zeros`, `_ones` or `_full`; nullopt
// otherwise, and for other dtypes unless the value is 0 or 1.
std::optional<double> uniform_value(const ir::Graph& g, ir::Entry e);

}  // namespace kiln::passes
