// A static timeline of a trace's lanes (trace_summary.h) as one
// self-contained SVG, for people without Perfetto at hand.
//
//   std::string svg = timeline_svg(read_chrome_trace("trace.json"), {.first_ms = 20});
//
// One row per device, lane and thread ("cpu(0) compute #3"), ordered by
// process id, lane and thread; time runs left to right from `start_ms` after
// the trace's first event for `first_ms` milliseconds (0: to the end), on an
// axis in ms since the first event, with nice ticks. Each event that
// overlaps that window is one <rect class="event" data-name="..."> clipped
// to the window (its name on it where it fits), with a
// <title> (shown on hover: name, start, duration); nested events (depth > 0)
// are drawn below their parents within the row. Colours are per op name (the
// part after the last '/', so CachedOp/Convolution and Convolution match)
// and stable across runs; a legend lists the ops taking the most time in the
// window. An empty trace is an internal error (the caller says so first);
// a start or length that is not a number from 0 to 1e12 ms is a ValueError.
#pragma once

#include <string>
#include <vector>

#include "frontend/viz/trace_summary.h"

namespace kiln::viz {

struct TimelineOptions {
  double start_ms = 0;  // the window's start, after the first event
  double first_ms = 0;  // the window's length (0: to the end)
  std::string title = "Timeline";
};

std::string timeline_svg(const std::vector<TraceEvent>& events, const TimelineOptions& options = {});

}  // namespace kiln::viz
