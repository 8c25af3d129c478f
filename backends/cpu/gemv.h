// Internal to the CPU backend: the dense-layer product for a few samples
// (a GEMV when m == 1), which cpu::dense_f32 (backends/cpu/linalg_kernels.h)
// runs instead of oneDNN for FullyConnected, _kiln_fc_act and dot(x, w^T)
// with at most 4 rows.
//
//   // rows [j0, j1) of y [m, n] = relu(x [m, k] . w [n, k]^T + bias [n]), m <= 4
//   cpu::gemv_rows({.m = 1, .k = 512, .n = 256}, x, w, bias, ActType::kRelu, y, j0, j1);
//
// Each pass reads a block of weight rows once for all m samples (8 rows for
// one sample, 4 for two or three: as many accumulators as the 16 AVX
// registers hold; four samples run as two passes of two), sums in AVX2/FMA
// lanes (the last k % 8 columns by masked loads, so nothing past a row is
// read) and reduces the rows' accumulators together; the bias and activation are applied to the range's
// outputs at the end. An output's summation order depends on k only, not on
// m, j0, j1 or the block it falls in, so splitting the rows over threads does
// not change the result. Without AVX2 and FMA, plain loops do the same.
//
// Dense layers on one sample are memory-bound: every call streams all of w
// (d2l's MLP: 656 KB) at about one core's L2 bandwidth. oneDNN 2.6's matmul
// with bias and relu measured 1.3-5.5x slower for m = 1..4 (k x n = 512x256,
// 256x128, 784x256, 2048x512; one thread) and over a microsecond per call on
// tiny layers.
//
// Arrays are dense, row-major and must not overlap; `bias` may be null and
// `act` relu, sigmoid, tanh, softrelu or none. Thread safe: ranges that do not
// overlap may run concurrently.
#pragma once

#include <cstdint>
#include <optional>

#include "backends/cpu/linalg_kernels.h"
#include "ir/ops/nn.h"

namespace kiln::cpu {

// The most samples gemv_rows takes; dense_f32 runs oneDNN above it.
inline constexpr int64_t kGemvMaxSamples = 4;

void gemv_rows(DenseDims d, const float* x, const float* w, const float* bias, std::optional<ActType> act, float* y,
               int64_t j0, int64_t j1);

// y[j] = act(y[j] + bias[j]) for j in [0, n); bias may be null.
void bias_act(float* y, const float* bias, int64_t n, std::optional<ActType> act);

}  // namespace kiln::cpu
