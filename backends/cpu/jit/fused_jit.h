// LLVM code generation for fused elementwise programs (backends/cpu/fused.h):
// one function `void f(void** bufs, int64_t begin, int64_t end)` per program,
// built with ORC's LLJIT for the host CPU and optimized with LLVM's O3
// pipeline, so the loop vectorizer turns it into SIMD code. exp, log, tanh and
// sigmoid are emitted inline as the polynomials of elemwise_math.h (so they
// vectorize too); sqrt is llvm.sqrt, pow a call to powf.
//
//   std::string error;
//   cpu::FusedLoopFn f = cpu::jit::compile_fused(program, program.to_string(), &error);
//
// Compiled code lives until the process exits. compile_fused caches by `key`
// (the program text), holds a lock while compiling, and may be called from
// any thread. Built without LLVM (backends/cpu/jit/fused_jit_absent.cc),
// available() is false and compile_fused returns nullptr.
#pragma once

#include <string>

#include "backends/cpu/fused.h"

namespace kiln::cpu::jit {

bool available();

// The compiled loop, or nullptr with `*error` set.
FusedLoopFn compile_fused(const FusedProgram& program, const std::string& key, std::string* error);

}  // namespace kiln::cpu::jit
