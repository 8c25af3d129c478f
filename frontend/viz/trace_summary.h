// Chrome/Perfetto traces as Kiln's profiler writes them (runtime/profiler.h),
// read back and summed per op, per device and lane.
//
//   std::vector<TraceEvent> events = read_chrome_trace("trace.json");
//   std::vector<LaneSummary> lanes = summarize_trace(events);
//   std::fputs(summary_table(lanes).c_str(), stdout);
//
// A trace is a JSON object with a "traceEvents" array (or the bare array).
// Complete events ("ph": "X", with ts and dur in microseconds) are kept; the
// process_name and thread_name metadata events name their device ("cpu(0)")
// and lane ("compute", "copy"); other events are ignored. An event lying
// inside another on the same thread (a hybridized block's CachedOp/<op>
// events inside its CachedOp) has depth 1 (2 inside that, ...).
//
// A lane's busy time is the sum of its depth-0 events' durations; an op's
// share is its total over that busy time (the depth-0 ops of a lane add up
// to 100%). Every event is counted exactly once: the totals of all rows of
// all lanes add up to the sum of the trace's durations.
// Errors: ValueError naming the file (and the event's index) for what is
// not such a trace, or holds times beyond 1e15 us; IOError when it cannot be
// read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::viz {

struct TraceEvent {
  std::string name;
  std::string device;  // the process's name, or "pid N"
  std::string lane;    // the thread's name, or "tid N"
  int64_t pid = 0, tid = 0;
  double start_us = 0, dur_us = 0;
  int depth = 0;  // events it lies inside on the same thread
};

// Events in trace order.
std::vector<TraceEvent> parse_chrome_trace(std::string_view json, const std::string& source);
std::vector<TraceEvent> read_chrome_trace(const std::string& path);

struct OpSummary {
  std::string name;
  double total_us = 0;
  int64_t count = 0;
  double share = 0;  // total_us / the lane's busy_us
  int depth = 0;     // the smallest depth of its events
};

struct LaneSummary {
  std::string device, lane;
  double busy_us = 0;   // sum of depth-0 durations
  double total_us = 0;  // sum of all durations (nested ones too)
  int64_t events = 0;
  std::vector<OpSummary> ops;  // by total time, largest first
};

// Lanes ordered by device, then lane name.
std::vector<LaneSummary> summarize_trace(const std::vector<TraceEvent>& events);

// The table `kiln profile` prints: per lane a header line, then one line per
// op (its `top` largest; the rest summed on one line, 0: all), and a last
// line with all lanes' totals.
std::string summary_table(const std::vector<LaneSummary>& lanes, size_t top = 0);

}  // namespace kiln::viz
