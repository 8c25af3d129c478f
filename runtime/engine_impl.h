// Internal to the engine: what engine.cc, engine_threaded.cc and
// engine_naive.cc share. Not part of Kiln's API.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string_view>

#include "runtime/engine.h"

namespace kiln::engine::detail {

std::unique_ptr<Engine> make_threaded_engine();
std::unique_ptr<Engine> make_naive_engine();

// Defaults read from the environment once per process.
int default_cpu_threads();           // KILN_CPU_THREADS, else all cores
int64_t default_max_pending_bytes();  // KILN_MAX_PENDING_MB, else 4 MiB

// Throws DeviceError unless `d` fits the engine's per-device tables.
void check_engine_device(Device d);
// Index of `d` in per-device tables of size kNumDeviceKinds * kMaxDevicesPerKind.
inline int device_index(Device d) { return static_cast<int>(d.kind) * kMaxDevicesPerKind + d.id; }
inline constexpr int kNumDeviceSlots = kNumDeviceKinds * kMaxDevicesPerKind;

// A small stable id for the calling thread (profiler rows).
uint64_t current_thread_id();

// Runs an op on a CUDA device's lane (backends/cuda/engine_lane.cc; without
// CUDA, backends/cuda_absent.cc throws DeviceError): binds the GPU to the
// thread, passes the lane's stream in ctx.stream, and returns once the
// stream has finished the op's work, throwing the op's asynchronous errors.
void run_on_cuda_lane(Fn& fn, RunContext ctx);

// With asynchronous CUDA lanes (the default, backends/cuda/README.md)
// a compute op completes once its work is queued on the GPU's stream: wait_all
// and drain_device call this, and it returns once every GPU that ran such an
// op has finished the work queued so far, throwing an asynchronous GPU error.
// A no-op otherwise (and without CUDA).
void drain_cuda_lanes();

// Runs `fn` with `ctx`, recording a profiler event when the profiler is on.
// Returns the error it raised, with "<name> on <device>" added to a
// kiln::Error's message; other exceptions become kiln::Error with that prefix.
std::exception_ptr run_op(Fn& fn, const RunContext& ctx, std::string_view name, int64_t bytes);

}  // namespace kiln::engine::detail
