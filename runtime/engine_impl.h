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

// Runs `fn` with `ctx` through the backend of ctx.device's kind
// (DeviceBackend::run: the device's lane), recording a profiler event when
// the profiler is on.
// Returns the error it raised, with "<name> on <device>" added to a
// kiln::Error's message; other exceptions become kiln::Error with that prefix.
std::exception_ptr run_op(Fn& fn, const RunContext& ctx, std::string_view name, int64_t bytes);

}  // namespace kiln::engine::detail
