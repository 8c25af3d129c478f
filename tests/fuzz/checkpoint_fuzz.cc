// Training checkpoints (frontend/train/checkpoint.cc): parse, and what parses
// writes back and parses again to the same sections.
#include <cstdlib>
#include <span>

#include "frontend/train/checkpoint.h"
#include "tests/fuzz/fuzz_target.h"

namespace kiln {

KILN_FUZZ_TARGET(checkpoint) {
  train::Checkpoint a = train::parse_checkpoint(std::as_bytes(data), "fuzz input");
  std::string bytes = train::serialize_checkpoint(a);
  train::Checkpoint b = train::parse_checkpoint(std::as_bytes(std::span(bytes)), "written back");
  if (a.sections.size() != b.sections.size()) std::abort();
  for (size_t i = 0; i < a.sections.size(); ++i)
    if (a.sections[i].name != b.sections[i].name || a.sections[i].arrays.size() != b.sections[i].arrays.size())
      std::abort();
}

}  // namespace kiln
