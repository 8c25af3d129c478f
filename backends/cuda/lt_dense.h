// FullyConnected (and _kiln_fc_act with ReLU) as one cuBLASLt call: the
// product, the bias and the activation in one kernel, through cuBLASLt's
// BIAS, RELU and RELU_BIAS epilogues, applied to the float32 accumulator
// before the result is rounded to the output's dtype. The unfused path
// (backends/cuda/linalg.cc) runs the product, a bias kernel and an activation
// kernel, and for 16-bit data a float32 temporary with two casts.
//
//   if (cuda::lt_dense(ctx, fc, x, w, bias_or_null, act, out)) return;   // else the unfused path
//
// Returns false, having queued nothing, where the epilogues do not cover the
// layer: an activation other than ReLU, a bias of another dtype than the
// output's, dtypes other than float32 or one 16-bit type throughout, 16-bit
// sizes not multiples of 8 (cuBLAS's slow kernels), empty products, or
// KILN_CUDA_LT=0 in the environment (set_lt_enabled). Descriptors and the
// heuristic's algorithm are cached per thread, device and problem; each
// thread has its own cuBLASLt handle and a 32 MiB workspace per device, kept
// until exit (the same memory inside and outside CUDA graph captures).
// Errors throw DeviceError naming the cuBLASLt call and the device.
#pragma once

#include <optional>

#include "ir/ops/linalg.h"
#include "ir/ops/nn.h"
#include "runtime/kernel.h"

namespace kiln::cuda {

bool lt_dense(const KernelContext& ctx, const FullyConnectedDims& fc, const TensorView& x, const TensorView& w,
              const TensorView* bias, std::optional<ActType> act, const TensorView& out);

bool lt_enabled();
void set_lt_enabled(bool on);

}  // namespace kiln::cuda
