// Internal to the CPU kernels: elementwise activations through oneDNN's
// eltwise primitives, which oneDNN compiles for the CPU's widest vectors
// (sixteen float32 lanes with AVX-512) and which read and write bfloat16
// directly, computing in float32.
//
//   if (onednn::eltwise_forward(ctx.run, dnnl::algorithm::eltwise_gelu_erf, t, x, y, n)) return;
//   ... otherwise Kiln's own loop ...
//
// Arrays are dense, n elements of dtype t; y may be x, dx may be dy. Returns
// false, having touched nothing, when oneDNN has no kernel for t on this CPU,
// or when n is below kEltwiseMinElements (the primitive's fixed costs, and one
// cached primitive per size, are not worth it there). Primitives are cached
// per (algorithm, dtype, n, thread count). Thread-safe.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>

#include "ir/dtype.h"
#include "runtime/engine.h"

namespace kiln::cpu::onednn {

inline constexpr int64_t kEltwiseMinElements = 1 << 15;

// y = f(x).
bool eltwise_forward(const engine::RunContext& run, dnnl::algorithm alg, DType t, const void* x, void* y, int64_t n);
// dx = dy * f'(x).
bool eltwise_backward(const engine::RunContext& run, dnnl::algorithm alg, DType t, const void* dy, const void* x,
                      void* dx, int64_t n);

}  // namespace kiln::cpu::onednn
