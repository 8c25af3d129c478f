// The widening algorithm behind HalfSupport::kFloat32Compute kernels
// (runtime/kernel.h), shared by every backend; a backend supplies only its
// temporaries and registers an adaptor that calls run_widened.
//
//   void cpu_widen(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out) {
//     CpuTemps temps;                     // frees its blocks when the call ends
//     run_widened(ctx, in, out, temps);
//   }
//   register_widening_kernel(DeviceKind::kCPU, &cpu_widen);
#pragma once

#include <span>

#include "runtime/kernel.h"

namespace kiln {

// Temporary device memory for one adaptor call, valid until the object is
// destroyed (for a stream-ordered device: until the work queued with it ran).
class WidenTemps {
 public:
  virtual ~WidenTemps() = default;
  virtual void* alloc(size_t bytes) = 0;
};

// Runs ctx.op's own kernel for the device on float32 copies of the call's
// float16/bfloat16 arrays: those inputs are converted by the backend's Cast
// kernel first; the float32 results, and inputs the op mutates
// (OpDef::mutate_inputs), are converted back (rounded to nearest even)
// after. Arrays of other dtypes are passed through untouched.
void run_widened(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out,
                 WidenTemps& temps);

}  // namespace kiln
