// Test hooks of the CUDA backend (no CUDA header, so tests include it freely).
//
//   if (device_count(DeviceKind::kCUDA) == 0) GTEST_SKIP() << cuda::testing::no_device_line();
//   engine::get().push([](engine::RunContext rc) { cuda::testing::launch_bad_config(rc.stream); }, ...);
#pragma once

#include <cstddef>
#include <string>

namespace kiln::cuda::testing {

// "no CUDA device (cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable device is detected); skipping"
std::string no_device_line();

// Launches a kernel with an invalid configuration (2048 threads per block):
// the launch itself fails; the error is not sticky.
void launch_bad_config(void* stream);
// Launches a kernel that writes through a null pointer: the error appears
// asynchronously and is sticky (the process's CUDA context is lost).
void launch_illegal_address(void* stream);

// The lane mode (device_runtime.h: lanes_async / set_lanes_async), and
// whether cuda(device)'s compute stream has finished everything queued on it
// (implemented in device_runtime.cc).
bool lanes_async();
void set_lanes_async(bool async);
bool compute_stream_idle(int device);

// TF32 for float32 products (device_runtime.h: tf32_allowed) and the
// cuBLASLt dense path (lt_dense.h: lt_enabled); each setter returns the
// previous value.
bool set_tf32_allowed(bool allowed);
bool set_lt_enabled(bool on);

// The host <-> GPU ceiling of this machine: GB/s of one cudaMemcpyAsync of
// `bytes` between page-locked host memory and cuda(device), best of five
// (implemented in copy.cc; the benchmarks print it beside Kiln's copies).
double pinned_copy_gbps(int device, size_t bytes, bool to_device);

}  // namespace kiln::cuda::testing
