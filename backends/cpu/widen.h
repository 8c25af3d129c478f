// The CPU's widening adaptor (runtime/kernel_widen.h), for kernels that take
// 16-bit floats but have no faster way for some call (oneDNN without float16
// kernels on this CPU, say):
//
//   if (!cpu::onednn::computes_in(x.dtype)) return cpu::widen(ctx, in, out);
#pragma once

#include <span>

#include "runtime/kernel.h"

namespace kiln::cpu {

// Runs ctx.op's kernel on float32 copies of the call's 16-bit float arrays
// and converts the results back; temporaries come from the device's pool.
void widen(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out);

}  // namespace kiln::cpu
