// The device-backend interface: everything the runtime needs from a kind of
// device, so that the engine, the storage pools and the kernel table never
// name one.
//
//   DeviceBackend& b = device_backend(DeviceKind::kCPU);
//   int n = b.device_count();                      // discovery
//   std::unique_ptr<storage::Pool> p = b.make_pool(Device::cpu(1));
//   b.run(fn, ctx);                                 // inside an engine op on ctx.device's lane
//   b.drain();                                      // wait for work queued on every device of the kind
//   copy_bytes(dst, Device::cpu(1), src, Device::cpu(0), n);  // inside an op on the copy lane
//   GraphCapture* gc = b.graph_capture();           // device graphs, or null (runtime/graph_capture.h)
//
// One backend per DeviceKind, registered once by the explicit initialization
// init_device_backends() (the first lookup runs it; backends/builtin_backends.cc
// lists the backends compiled into this library). A kind nobody registered has
// no backend: lookups throw DeviceError naming the kind ("no backend for cuda
// devices: Kiln was built without it"). A vendor adds a folder under backends/
// with a DeviceBackend and one line in builtin_backends.cc; the runtime does
// not change.
//
// Ownership: the registry owns the backends and never destroys them (the
// engine may still run operations while static objects are torn down).
// Thread safety: lookups are lock-free and may run on any thread once
// initialization returned; every member function of a backend may be called
// from any thread at the same time.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "ir/device.h"
#include "ir/dtype.h"
#include "runtime/engine.h"
#include "runtime/storage.h"

namespace kiln {

class GraphCapture;  // runtime/graph_capture.h

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // ---- discovery
  // Devices of this kind this process may use: ids 0 .. device_count() - 1.
  // Constant for the life of the process.
  virtual int device_count() = 0;
  // One line for `kiln info` ("cpu(0) [8 cores]", "cuda(0), cuda(1)"); empty
  // when there is nothing to show.
  virtual std::string description() = 0;

  // ---- memory
  // The caching pool of `device` (a checked device of this kind). Called once
  // per device; storage::pool keeps the result until exit.
  virtual std::unique_ptr<storage::Pool> make_pool(Device device) = 0;

  // ---- lanes
  // Runs one engine operation on the lane ctx.lane of ctx.device (a device of
  // this kind), on the engine worker thread of that lane. The backend may bind
  // the device to the thread and set ctx.stream before calling fn. When run
  // returns the operation is complete for the engine: either its work has
  // finished, or (asynchronous backends) its work is queued where every later
  // consumer is ordered after it, and drain() waits for it. Throws the
  // operation's errors (those of work that finished); called once per op, so
  // it must not allocate or lock.
  virtual void run(engine::Fn& fn, engine::RunContext ctx) = 0;
  // Returns once the work queued so far on every device of this kind has
  // finished, throwing an asynchronous device error. A no-op for backends
  // whose operations finish inside run().
  virtual void drain() = 0;

  // ---- copies
  // Copies `bytes` from `src` on `from` to `dst` on `to`, where each of the
  // two devices is of this kind or the host (a CPU device). Called by
  // copy_bytes inside an engine op on the copy lane of
  // copy_lane_device(from, to); returns when the bytes have arrived. The
  // backend owns the ordering against work it queued asynchronously: a copy
  // first waits for (or orders itself after) the work queued on `from`.
  virtual void copy(void* dst, Device to, const void* src, Device from, size_t bytes) = 0;

  // ---- kernels
  // Registers this kind's kernels in the kernel table (runtime/kernel.h).
  // Called once, the first time the kernel table is read.
  virtual void register_kernels() = 0;

  // ---- graphs (optional)
  // The recorder of this kind's device work into graphs replayed with one
  // launch (runtime/graph_capture.h), owned by the backend; null when the
  // kind has none (the default: CPUs run every kernel as it comes).
  virtual GraphCapture* graph_capture() { return nullptr; }

  // ---- layouts (optional)
  // Whether convolutions with `t` data (float16 or bfloat16) run faster on
  // channel-last (NHWC) activations on this kind's devices, so that compiled
  // graphs move them there (the channels-last pass, passes/channels_last.h).
  // False by default.
  virtual bool prefers_channels_last(DType) { return false; }
};

// Registers the backend of `kind`. Called from the initialization list only
// (backends/builtin_backends.cc) or, in tests, for a kind that has none yet.
// Internal error when `kind` already has one.
void register_device_backend(DeviceKind kind, std::unique_ptr<DeviceBackend> backend);

// Runs the registrations of the backends compiled into this library, once;
// every lookup below calls it first.
void init_device_backends();

// The backend of `kind`. Throws DeviceError naming the kind when there is none.
DeviceBackend& device_backend(DeviceKind kind);
// The backend of `kind`, or nullptr.
DeviceBackend* find_device_backend(DeviceKind kind);

// Number of usable devices of `kind` (0 when no backend is registered).
int device_count(DeviceKind kind);

// Calls drain() on every registered backend (engine::wait_all).
void drain_device_backends();
// Calls register_kernels() on every registered backend (the kernel table).
void register_device_kernels();

// The device whose copy lane runs a copy from `from` to `to`: the destination,
// unless the destination is the host and the source a device, then the
// source (so a device copy always runs on that device's lane).
inline Device copy_lane_device(Device from, Device to) { return !to.is_cpu() || from.is_cpu() ? to : from; }

// Copies `bytes` between any two devices whose backends can: two devices of
// one kind, or the host and a device. Call inside an engine op on the copy
// lane of copy_lane_device(from, to); returns when the bytes have arrived.
// Throws DeviceError when no backend copies between the two.
void copy_bytes(void* dst, Device to, const void* src, Device from, size_t bytes);

// Defined by backends/builtin_backends.cc: registers each backend compiled in.
void register_builtin_device_backends();

}  // namespace kiln
