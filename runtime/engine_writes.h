// Write sequence numbers of engine variables: whether an array may have
// changed, without reading it or waiting for it.
//
//   uint64_t seen = engine::last_write(a.var());
//   ...                                   // later, on any thread
//   if (engine::last_write(a.var()) == seen) { /* no write of `a` was pushed since */ }
//
// Every push that writes a variable, and every new variable, takes the next
// number of one process-wide counter, so a number identifies one value of one
// variable: a variable record recycled from the engine's pool gets a new
// number, never an old one. Writes count when they are pushed (queued), not
// when they run: a value computed by an op pushed after `seen` was taken reads
// the same data as long as the number is unchanged. Memory written without
// an engine push (which the engine's contract does not allow) is not seen.
//
// Thread safety: any thread may call it.
#pragma once

#include <cstdint>

#include "runtime/engine.h"

namespace kiln::engine {

// The number of the last write pushed to `var` (or of its creation); 0 for null.
uint64_t last_write(const Var* var);

}  // namespace kiln::engine
