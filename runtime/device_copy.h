// Copies between devices when a GPU is involved (the CUDA backend's hook for
// NDArray::copy_to and nd::array).
//
//   engine::get().push([=](engine::RunContext) { copy_between_devices(dst, to, src, from, n); }, {src_var}, {dst_var},
//                      {.device = copy_lane_device(from, to), .lane = engine::Lane::kCopy, .name = "copy_to"});
//
// Must run inside an engine op on the copy lane of copy_lane_device(from, to)
// (the GPU, or for GPU to GPU the destination); returns when the bytes have
// arrived. Host memory goes through pinned staging buffers. Implemented in
// backends/cuda/copy.cc; without CUDA (backends/cuda_absent.cc) it throws
// DeviceError.
#pragma once

#include <cstddef>

#include "ir/device.h"

namespace kiln {

void copy_between_devices(void* dst, Device to, const void* src, Device from, size_t bytes);

inline Device copy_lane_device(Device from, Device to) { return to.is_cuda() || !from.is_cuda() ? to : from; }

}  // namespace kiln
