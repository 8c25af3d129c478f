// Launcher of softmax with use_length on CUDA (softmax_length.cu); data of
// dtype code `dtype` (float32, float16 or bfloat16: kernels.h), computed in
// float32 and rounded once; semantics in ir/ops/nn.h (SoftmaxAttrs).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kiln::cuda {

// Row r of [outer, n, inner] (elements inner apart) normalizes its first
// lengths[r] elements (clamped to [0, n]) and writes 0 after them; lengths is
// on the device, one int64 per row. One thread per row.
cudaError_t launch_softmax_length(int dtype, const void* x, const int64_t* lengths, void* y, int64_t outer, int64_t n,
                                  int64_t inner, float inv_temperature, cudaStream_t s);

}  // namespace kiln::cuda
