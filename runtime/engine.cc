// engine::create / engine::get and what both engines share: environment
// defaults, running an op with error context, profiler events.
#include "runtime/engine.h"

#include <fmt/format.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <string>
#include <thread>

#include "ir/error.h"
#include "runtime/device_backend.h"
#include "runtime/engine_impl.h"
#include "runtime/engine_var.h"
#include "runtime/engine_writes.h"
#include "runtime/profiler.h"

namespace kiln::engine {

namespace detail {

namespace {

// Parses a positive integer environment variable; 0 when unset, throws
// ValueError when set to something else.
int64_t env_positive(const char* name) {
  const char* s = std::getenv(name);
  if (!s || !*s) return 0;
  std::string_view v(s);
  int64_t x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  KILN_CHECK(ec == std::errc() && p == v.data() + v.size() && x > 0, ValueError,
             "{}='{}': expected a positive integer", name, v);
  return x;
}

}  // namespace

int default_cpu_threads() {
  static const int n = [] {
    int64_t env = env_positive("KILN_CPU_THREADS");
    if (env > 0) return static_cast<int>(std::min<int64_t>(env, 1 << 16));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return n;
}

int64_t default_max_pending_bytes() {
  static const int64_t n = [] {
    int64_t mb = env_positive("KILN_MAX_PENDING_MB");
    return mb > 0 ? mb << 20 : int64_t{4} << 20;
  }();
  return n;
}

void check_engine_device(Device d) {
  // Any kind the per-device tables hold; one without a backend fails when its
  // first op runs (run_op), with the backend registry's message.
  KILN_CHECK(static_cast<int>(d.kind) >= 1 && static_cast<int>(d.kind) < kNumDeviceKinds && d.id >= 0 &&
                 d.id < kMaxDevicesPerKind,
             DeviceError, "engine: cannot run operations on device {} (ids go from 0 to {})", d,
             kMaxDevicesPerKind - 1);
}

uint64_t current_thread_id() {
  static std::atomic<uint64_t> next{1};
  thread_local uint64_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

std::exception_ptr run_op(Fn& fn, const RunContext& ctx, std::string_view name, int64_t bytes) {
  if (!fn) return nullptr;
  bool profiling = profiler::enabled();
  int64_t start = profiling ? profiler::now_ns() : 0;
  std::exception_ptr error;
  try {
    device_backend(ctx.device.kind).run(fn, ctx);
  } catch (Error& e) {
    e.add_context(fmt::format("{} on {}", name, ctx.device));
    error = std::current_exception();
  } catch (const std::exception& e) {
    error = std::make_exception_ptr(Error(fmt::format("{} on {}: {}", name, ctx.device, e.what())));
  } catch (...) {
    error = std::make_exception_ptr(Error(fmt::format("{} on {}: unknown exception", name, ctx.device)));
  }
  if (profiling) {
    profiler::Event event;
    event.name = std::string(name);
    event.device = ctx.device;
    event.lane = static_cast<int>(ctx.lane);
    event.thread = current_thread_id();
    event.start_ns = start;
    event.end_ns = profiler::now_ns();
    event.bytes = bytes;
    profiler::record(std::move(event));
  }
  return error;
}

}  // namespace detail

std::unique_ptr<Engine> create(Kind kind) {
  return kind == Kind::kNaive ? detail::make_naive_engine() : detail::make_threaded_engine();
}

// The global engine is created on first use and deliberately never destroyed:
// operations may still be finishing on worker threads while static objects
// are torn down, and destroying the engine from a static destructor would
// race with them. Instead an atexit handler waits for the pending operations
// (dropping their errors); the idle workers then die with the process.
// That handler is a fallback only: it runs after the static objects created
// later than the engine (oneDNN builds some lazily) are destroyed, so a kernel
// still queued then may crash. Programs call wait_all() before leaving main();
// the kiln program and the test main do.
Engine& get() {
  static Engine* const engine = [] {
    profiler::init_from_env();
    const char* env = std::getenv("KILN_ENGINE");
    std::string_view name = env ? env : "";
    KILN_CHECK(name.empty() || name == "threaded" || name == "naive", ValueError,
               "KILN_ENGINE='{}': expected 'threaded' or 'naive'", name);
    Engine* e = create(name == "naive" ? Kind::kNaive : Kind::kThreaded).release();
    std::atexit([] {
      try {
        get().wait_all();
      } catch (...) {  // errors nobody waited for, or exit() called from an op
      }
    });
    return e;
  }();
  return *engine;
}

void wait_all() { get().wait_all(); }

void drain_device(Device device) { device_backend(device.kind).drain(); }

namespace detail {

uint64_t next_write_seq() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace detail

uint64_t last_write(const Var* var) { return var ? var->last_write.load(std::memory_order_acquire) : 0; }

}  // namespace kiln::engine
