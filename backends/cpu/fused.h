// CPU execution of _kiln_fused_elemwise programs (ir/ops/fused.h): a loop
// compiled by LLVM (backends/cpu/jit/fused_jit.h) when Kiln was built with
// LLVM and KILN_JIT is not 0, else an interpreter.
//
//   cpu::FusedLoop loop = cpu::fused_loop(program);     // compiles once per program text
//   loop(program, bufs, 0, n);                          // bufs: inputs then outputs
//
// A loop computes positions [begin, end) of a run: `bufs` holds one float
// pointer per program input, then one per output (16-bit arrays reach it
// through float32 chunks: fused_run). Full and row inputs and
// the outputs are accessed at [i]; scalar and channel inputs at [0] (the
// kernel points them at the run's element). The kernel (fused.cc) splits an
// output into runs within which every channel input is one element and every
// row input is contiguous, and the runs over threads.
//
// Agreement with the unfused float32 kernels: the interpreter uses the same
// formulas and vector polynomials (elemwise_math.h); results differ by at
// most a few ulp where GCC contracted a multiply-add of an unfused kernel into
// an FMA or vectorized its powf through libmvec, and for softrelu (log1p
// computed from log). The JIT emits the same polynomials in LLVM IR without
// fast-math (multiply-adds as llvm.fmuladd) and agrees with the interpreter
// to 1e-6 relative (tests/runtime/fused_kernel_test.cc).
// Thread safety: fused_loop may be called from any thread (the JIT's cache is
// locked); a loop is a pure function of its buffers.
#pragma once

#include <cstdint>

#include "ir/dtype.h"
#include "ir/ops/fused.h"
#include "ir/shape.h"

namespace kiln::cpu {

// A compiled loop: `void f(void** bufs, int64_t begin, int64_t end)`.
using FusedLoopFn = void (*)(void** bufs, int64_t begin, int64_t end);

// Evaluates the program in blocks of 512 positions with one vectorized loop
// per instruction.
void fused_interpret(const FusedProgram& p, void** bufs, int64_t begin, int64_t end);

// The compiled loop of `ref`'s program (compiled on the first call for its
// text and cached in `ref`), or nullptr when the interpreter is to be used
// (no LLVM, KILN_JIT=0, or the JIT failed: a warning is printed once).
FusedLoopFn fused_loop(const FusedProgramRef& ref);

// Whether fused_loop compiles: Kiln was built with LLVM and KILN_JIT is not 0.
bool fused_jit_enabled();

// Runs `ref`'s program over [0, n) of `bufs`' full-size layout: `loop` (or
// the interpreter when null), over runs and threads as described above.
// An output may be the same buffer as an input (in-place: the memory planner
// pairs every output with every full input, passes::inplace_pairs); other
// overlaps between outputs and inputs are not allowed.
// `in_shapes` are the inputs' shapes, `out` the output shape. Every buffer
// holds `dtype` elements: float32, or float16/bfloat16, which are converted
// to float32 in chunks of positions for the loop (inputs before outputs, so
// in-place is safe) and its float32 results rounded once into the outputs.
void fused_run(const FusedProgramRef& ref, FusedLoopFn loop, void* const* bufs, const Shape* in_shapes,
               const Shape& out, int num_threads, DType dtype = DType::kFloat32);

}  // namespace kiln::cpu
