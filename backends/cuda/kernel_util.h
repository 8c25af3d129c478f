// Helpers shared by the CUDA kernel files (the .cc side): the run context's
// stream, dtype checks, launch checks, index builders for kernels.h.
//
//   cudaStream_t s = cuda::stream_of(ctx);
//   const int dtype = cuda::require_float(in, out);              // float32/float16/bfloat16, else NotSupported
//   KILN_CUDA_LAUNCH(cuda::launch_unary(op, dtype, x, y, n, 0, 0, s), ctx);
#pragma once

#include <span>

#include "backends/cuda/check.h"
#include "backends/cuda/kernels.h"
#include "ir/ops/nn.h"
#include "runtime/kernel.h"

namespace kiln::cuda {

inline cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.run.stream); }

// Throws NotSupported unless every view is float32 (the dtype the first CUDA
// kernels handle; the engine prefixes the op's name and device).
void require_f32(std::span<const TensorView> in, std::span<const TensorView> out);

// The dtype code (kernels.h) of a call whose views are all float32, all
// float16 or all bfloat16, for the kernels that take 16-bit floats directly;
// NotSupported naming the view and its dtype otherwise.
int require_float(std::span<const TensorView> in, std::span<const TensorView> out);

// A double attribute (scalar, clip bound) as a kernel of dtype `t` sees it:
// rounded to t first, as the CPU kernels do (to float32 for float32).
float attr_as(DType t, double v);

// The widening adaptor (runtime/kernel_widen.h) for a kernel that takes
// 16-bit floats but has no faster way for this call: ctx.op's kernel on
// float32 copies (backends/cuda/widen.cc).
void widen(const KernelContext& ctx, std::span<const TensorView> in, std::span<const TensorView> out);

// in[i]'s strides broadcast against `out` (right-aligned, 0 on length-1 axes).
std::array<int64_t, kMaxDims> broadcast_strides(const Shape& in, const Shape& out);
// ndim 0 when both are dense at out's shape.
BroadcastIndex make_broadcast_index(const Shape& a, const Shape& b, const Shape& out);
// A dense copy of `shape` (the identity index).
StridedIndex dense_index(const Shape& shape);

// Activation's forward op (elemwise.cu) and its backward form (from the output).
UnaryOp activation_op(ActType t);
BinaryOp activation_grad_op(ActType t);

}  // namespace kiln::cuda

// Checks a launcher's status, naming the launcher.
#define KILN_CUDA_LAUNCH(call, ctx) KILN_CUDA_CHECK(call, (ctx).run.device)
