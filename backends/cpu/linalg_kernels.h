// Internal to the CPU backend: the float32 dense-layer product that dot
// (backends/cpu/linalg.cc) shares with FullyConnected and _kiln_fc_act
// (backends/cpu/nn_dense.cc).
//
//   cpu::dense_f32(ctx.run, {.m = 1, .k = 512, .n = 256}, x, w, bias, ActType::kRelu, y);
//   // y [m, n] = relu(x [m, k] . w [n, k]^T + bias [n])
//
// Up to four samples (m <= kGemvMaxSamples) run cpu::gemv_rows
// (backends/cpu/gemv.h), its rows split over the threads, with the bias and
// activation applied to each block of outputs as it is produced; larger
// products run oneDNN's matmul with the bias and an eltwise post-op; tiny
// ones run the plain loops and a second pass. Arrays are dense, row-major and must not overlap.
#pragma once

#include <cstdint>
#include <optional>

#include "ir/ops/nn.h"
#include "runtime/engine.h"

namespace kiln::cpu {

struct DenseDims {
  int64_t m = 0, k = 0, n = 0;
};

// `bias` may be null (no bias); `act` is relu, sigmoid, tanh or softrelu, or
// none. Uses up to run.num_threads threads.
void dense_f32(const engine::RunContext& run, DenseDims d, const float* x, const float* w, const float* bias,
               std::optional<ActType> act, float* y);

// The same product with every operand (and the bias) in `dtype`, bfloat16 or
// float16, on oneDNN's matmul (float32 accumulation, one rounding of the
// result). Only where cpu::onednn::computes_in(dtype); d.k > 0.
void dense_onednn(const engine::RunContext& run, DenseDims d, DType dtype, const void* x, const void* w,
                  const void* bias, std::optional<ActType> act, void* y);

}  // namespace kiln::cpu
