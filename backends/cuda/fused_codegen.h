// CUDA C++ source of one kernel per fused-program signature, for NVRTC
// (fused_nvrtc.h compiles, caches and launches it).
//
//   FusedSignature sig{.program = ref.text(), .dtype = DType::kFloat16, .vector = true, .index64 = false};
//   std::string src = fused_kernel_source(ref.program(), sig);
//   // extern "C" __global__ void kiln_fused(const FusedKernelArgs a)
//
// The kernel computes a `_kiln_fused_elemwise` program (ir/ops/fused.h) over
// positions [0, a.n): inputs are loaded as their kind says (full: [i];
// scalar: [0], once per thread; channel/row: [(i / inner) % len], the two
// divisions by multiply-high with precomputed magic numbers unless
// `index64`), converted to float32, run through the instructions (each one a
// call of ir/ops/elemwise_math.h's function for its opcode, whose text is
// pasted into the source and inlined by the compiler), and each output is
// rounded once to the dtype. With `vector`, a thread handles 16 bytes per
// full input and output (float4, or eight 16-bit values as a uint4) and the
// n % (16 / element size) last positions are done one by one; the caller
// sets it only when every full input and output is 16-byte aligned. An
// output may be the very buffer of a full input (in place): each position is
// read before it is written, by the same thread.
//
// The source needs no header: float16 goes through PTX's cvt instructions,
// bfloat16 through bit operations (round to nearest even, NaN kept quiet:
// ir/dtype.h's float_to_bf16).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "ir/dtype.h"
#include "ir/ops/fused.h"

namespace kiln::cuda {

// The generated kernel's name.
inline constexpr char kFusedKernelName[] = "kiln_fused";
// Most inputs and outputs of a program the generated kernels take.
inline constexpr int kFusedKernelMaxOperands = 32;

// The kernel's one parameter, written once for the host and the generated
// source. `inner`/`len` (channel and row inputs): positions i read element
// (i / inner[k]) % len[k]; `*_mul`/`*_shift` the magic numbers of those
// divisions (fused_fast_div) when the kernel uses 32-bit indices.
// clang-format off
#define KILN_FUSED_KERNEL_ARGS                                                     \
  struct FusedKernelArgs {                                                         \
    const void* in[32];                                                            \
    void* out[32];                                                                 \
    long long inner[32];                                                           \
    long long len[32];                                                             \
    unsigned inner_mul[32];                                                        \
    unsigned inner_shift[32];                                                      \
    unsigned len_mul[32];                                                          \
    unsigned len_shift[32];                                                        \
    long long n;                                                                   \
  };
// clang-format on
KILN_FUSED_KERNEL_ARGS

// What selects a kernel: the program, the element type and the access mode.
struct FusedSignature {
  std::string program;      // FusedProgram::to_string()
  DType dtype = DType::kFloat32;  // float32, float16 or bfloat16
  bool vector = false;      // 16-byte loads and stores of full inputs and outputs
  bool index64 = false;     // n > 2^31 - 1: 64-bit divisions for channel/row inputs
  // With `vector`: every channel input is constant over each 16-byte group
  // of positions (its inner size is a multiple of the group's length), so
  // its element is found once per group.
  bool channel_grouped = false;
  // "<program>|<dtype>|v|g|i32": the cache key (with the device).
  std::string key() const;
};

// The magic numbers of an unsigned 32-bit division by d (1 <= d < 2^31) for
// dividends below 2^31: i / d == (umulhi(i, mul) + i) >> shift.
struct FastDiv {
  uint32_t mul = 1, shift = 0;
};
FastDiv fused_fast_div(uint32_t d);

// The kernel's source. Throws NotSupported for a dtype other than the three,
// or more than kFusedKernelMaxOperands inputs or outputs (naming the program).
std::string fused_kernel_source(const FusedProgram& p, const FusedSignature& sig);

}  // namespace kiln::cuda
