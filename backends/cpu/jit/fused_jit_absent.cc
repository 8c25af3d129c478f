// Built without LLVM: fused programs run in the interpreter.
#include "backends/cpu/jit/fused_jit.h"

namespace kiln::cpu::jit {

bool available() { return false; }

FusedLoopFn compile_fused(const FusedProgram&, const std::string&, std::string* error) {
  *error = "Kiln was built without LLVM";
  return nullptr;
}

}  // namespace kiln::cpu::jit
