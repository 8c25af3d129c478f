// The interpreter of _kiln_fused_elemwise programs (kernels.h).
#include "backends/cuda/kernels.h"
#include "ir/ops/elemwise_math.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void fused_kernel(FusedKernelProgram p, FusedPointers ptrs, int64_t n) {
  float v[kFusedMaxInputs + kFusedMaxInstrs];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    for (int k = 0; k < p.num_inputs; ++k) {
      int64_t at = p.input_kind[k] == 0 ? i : p.input_kind[k] == 1 ? 0 : (i / p.input_inner[k]) % p.input_len[k];
      v[k] = ptrs.in[k][at];
    }
    for (int j = 0; j < p.num_instrs; ++j) {
      float a[3];
      for (int q = 0; q < 3; ++q) a[q] = p.arg_value[j][q] >= 0 ? v[p.arg_value[j][q]] : p.arg_literal[j][q];
      v[p.num_inputs + j] = math::fused_eval(static_cast<FusedOpcode>(p.op[j]), a[0], a[1], a[2]);
    }
    for (int k = 0; k < p.num_outputs; ++k) ptrs.out[k][i] = v[p.outputs[k]];
  }
}

}  // namespace

cudaError_t launch_fused(const FusedKernelProgram& program, const FusedPointers& ptrs, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  fused_kernel<<<static_cast<int>(blocks > 8192 ? 8192 : blocks), kThreads, 0, s>>>(program, ptrs, n);
  return cudaGetLastError();
}

}  // namespace kiln::cuda
