// The asynchronous dependency engine (MXNet's contract).
//
//   auto& eng = engine::get();
//   engine::Var* a = eng.new_var();
//   eng.push([](engine::RunContext) { /* write a */ }, {}, {a}, {.device = Device::cpu(0), .name = "fill"});
//   eng.push([](engine::RunContext) { /* read a */ }, {a}, {}, {.device = Device::cpu(1), .name = "use"});
//   eng.wait_for_var(a);   // rethrows the error of the op that failed writing `a`, if any
//   eng.delete_var(a);     // deferred until the work pending on `a` has finished
//   eng.delete_var(b, [block] { free(block); });  // and then frees what `b` guarded
//
// Ordering: an operation runs after every earlier-pushed operation that writes
// a variable it reads or writes, and after every earlier-pushed reader of a
// variable it writes. Everything else may run in parallel. "Earlier" is the
// order of `push` calls (calls from different threads are ordered by when they
// take effect).
//
// Lanes: every device (each cpu(i) and each accelerator is its own device) has a
// compute lane and a copy lane, each served by its own worker thread(s), so
// copies overlap compute and two CPU devices compute on two cores. How an
// operation runs on a lane, and when it counts as complete, is up to the
// device's backend (DeviceBackend::run, runtime/device_backend.h). Among ready
// operations on one lane, higher `priority` runs first (FIFO among equals).
//
// Errors: an operation that throws poisons every variable it writes with the
// exception (its message prefixed with the op name and device). An operation
// that reads a poisoned variable (a variable it both reads and writes counts
// as read) does not run; its written variables inherit the error. A pure write
// to a poisoned variable runs. `wait_for_var` rethrows a variable's error; `wait_all`
// rethrows the first error raised since the previous `wait_all` and clears that
// record. A write whose inputs are all clean and that succeeds clears the
// poison of the variables it writes. Unrelated work is unaffected.
//
// Back-pressure: `PushOptions::bytes` (bytes of output the op allocates) are
// counted per device while the op is pending; `push` blocks while the count of
// the op's device is above `max_pending_bytes()` and another op of that
// device is pending, so a frontend that runs ahead cannot pile up unbounded
// memory. The default bound (4 MiB) keeps a frontend about one large op ahead
// of each device, which is all a device needs to stay busy: ops whose outputs
// are that large take far longer than a push. Small ops are not held back.
// Pushes from engine worker threads never block. Nor does a push while
// another device that the frontend fed within its last 1024 pushes has
// nothing pending: a loop feeding several devices from one thread (shard
// after shard) must not hold the next device's work behind this device's
// backlog while that device idles. That exemption still stops at
// kStarvingSlack times the bound, so one device's backlog stays bounded
// whatever the others do.
//
// Rendezvous: an operation that blocks until operations of *other* devices,
// possibly pushed after it, have run (a cross-device rendezvous such as
// SyncBatchNorm's sum, frontend/sync_sum.h) must set
// `PushOptions::rendezvous`. Every device has its own compute worker, so such
// an op blocks only its own device's lane and the ops that release it run on
// the other devices' lanes. While any rendezvous op is pending, `push` applies
// no back-pressure: the ops that would release it may still have to be
// pushed by the very thread that back-pressure would hold. The naive engine
// runs each op in the pushing thread, so it cannot run a rendezvous that
// waits for a later push; callers reject it there.
//
// Thread safety: every method may be called from any thread, including from
// inside a running operation (except `wait_*`, which throw from a worker).
//
// KILN_ENGINE=naive selects NaiveEngine: each push runs the operation at once
// in the calling thread (same error semantics), for debugging.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>

#include "ir/device.h"
#include "runtime/unique_function.h"

namespace kiln::engine {

struct Var;  // opaque; owned by the engine

enum class Lane : int8_t { kCompute = 0, kCopy = 1 };
inline constexpr int kNumLanes = 2;

// Passed to every operation when it runs.
struct RunContext {
  Device device;
  Lane lane = Lane::kCompute;
  int num_threads = 1;  // intra-op threads this CPU operation may use
  void* stream = nullptr;  // the lane's stream or queue, set by the device's backend (nullptr on CPUs)
};

using Fn = UniqueFunction<void(RunContext)>;
// Called once a deleted variable is idle (see delete_var). Must not throw.
using OnIdle = UniqueFunction<void()>;

struct PushOptions {
  Device device = Device::cpu(0);
  Lane lane = Lane::kCompute;
  int priority = 0;
  // Must stay valid until the op completes (use a literal or an OpDef name).
  std::string_view name = "op";
  int64_t bytes = 0;  // output bytes held while pending (back-pressure)
  bool rendezvous = false;  // waits for other devices' later ops (see above)
};

enum class Kind { kThreaded, kNaive };

class Engine {
 public:
  virtual ~Engine() = default;

  virtual Var* new_var() = 0;
  virtual void push(Fn fn, std::span<Var* const> reads, std::span<Var* const> writes,
                    const PushOptions& options) = 0;
  void push(Fn fn, std::initializer_list<Var*> reads, std::initializer_list<Var*> writes,
            const PushOptions& options) {
    push(std::move(fn), std::span<Var* const>(reads.begin(), reads.size()),
         std::span<Var* const>(writes.begin(), writes.size()), options);
  }
  // Frees `var` once every operation pushed so far that uses it has
  // finished, and then calls `on_idle` (when given): on this thread when
  // none is pending, else on the thread that finishes the last one. Storage
  // that only operations on `var` touch can so be freed in `on_idle` without
  // those operations holding a reference to it (NDArray chunks do).
  void delete_var(Var* var) { delete_var(var, nullptr); }
  virtual void delete_var(Var* var, OnIdle on_idle) = 0;
  virtual void wait_for_var(Var* var) = 0;
  virtual void wait_all() = 0;

  // Number of operations pushed but not finished (or skipped).
  virtual int64_t num_pending() const = 0;
  virtual int64_t pending_bytes() const = 0;

  virtual Kind kind() const = 0;

  // Back-pressure bound per device; default 4 MiB or KILN_MAX_PENDING_MB.
  void set_max_pending_bytes(int64_t bytes) { max_pending_bytes_ = bytes; }
  int64_t max_pending_bytes() const { return max_pending_bytes_; }
  // How far past the bound a device's backlog may grow while another device starves.
  static constexpr int64_t kStarvingSlack = 4;

  // Intra-op threads for CPU operations on `device` (default: all cores, or
  // KILN_CPU_THREADS). Passed to ops as RunContext::num_threads.
  virtual void set_cpu_threads(Device device, int threads) = 0;
  virtual int cpu_threads(Device device) const = 0;

 protected:
  int64_t max_pending_bytes_ = 4ll << 20;
};

std::unique_ptr<Engine> create(Kind kind);

// The process-wide engine used by NDArray; chosen by KILN_ENGINE (threaded
// by default) on first use.
Engine& get();

// Shorthand for get().wait_all(). Call it before returning from main(): work
// still queued when exit() starts may run after the libraries it uses have
// torn down their static objects.
void wait_all();

// Backends with asynchronous lanes complete a compute op once its work is
// queued on the device. This returns once the work queued so far on every
// device of `device`'s kind has finished (DeviceBackend::drain, rethrowing an
// asynchronous device error); a no-op for CPUs. NDArray::wait_to_read calls
// it, and wait_all() drains every kind; reading values needs no drain (a
// backend's copies order themselves after its queued work).
void drain_device(Device device);

}  // namespace kiln::engine
