// The profiler: records every engine operation and writes Chrome trace /
// Perfetto JSON, so the parallelism across devices and lanes is visible.
//
//   profiler::start();                 // or KILN_PROFILE=trace.json for the whole run
//   ... work ...
//   engine::wait_all();
//   profiler::stop();
//   profiler::dump("trace.json");      // open in ui.perfetto.dev or chrome://tracing
//
// When off, the cost on the hot path is one relaxed atomic load and branch
// (`profiler::enabled()`). Thread safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/device.h"

namespace kiln::profiler {

struct Event {
  std::string name;
  Device device;
  int lane = 0;        // engine::Lane as int
  uint64_t thread = 0; // small stable id of the worker thread
  int64_t start_ns = 0;  // steady clock, relative to the profiler's epoch
  int64_t end_ns = 0;
  int64_t bytes = 0;
};

namespace detail {
extern std::atomic<bool> g_enabled;
}

inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

void start();
void stop();
// Nanoseconds on the profiler's clock.
int64_t now_ns();
void record(Event event);
// All events recorded so far (copy), in recording order.
std::vector<Event> events();
void clear();
// Writes Chrome trace JSON atomically (temporary file, then rename): one
// process per device, one thread row per lane/worker. Throws IOError.
void dump(const std::string& path);

// Called once at startup: honours KILN_PROFILE=path (start now, dump at exit).
void init_from_env();

}  // namespace kiln::profiler
