#include "tests/fuzz/fuzz_target.h"

namespace kiln::fuzz {

std::vector<Target>& targets() {
  static std::vector<Target> all;
  return all;
}

bool register_target(const char* name, TargetFn fn) {
  targets().push_back({name, fn});
  return true;
}

}  // namespace kiln::fuzz
