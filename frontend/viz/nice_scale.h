// Axis scales with "nice" tick values (1, 2, 2.5 or 5 times a power of ten),
// for the axes of Kiln's charts.
//
//   NiceScale s = nice_scale(0.113, 0.871, 5);   // lo 0, hi 1, step 0.2
//   for (double t : s.ticks()) label(format_tick(t, s.step));
//
// The scale covers [lo, hi] of the data: s.lo <= lo and s.hi >= hi, both
// multiples of s.step, with about `target` intervals between them (never
// fewer than 2 unless lo == hi). A degenerate range (lo == hi) is widened
// around the value so that it still gets a readable axis. Inputs must be
// finite with lo <= hi (an internal error otherwise).
#pragma once

#include <string>
#include <vector>

namespace kiln::viz {

struct NiceScale {
  double lo = 0;
  double hi = 1;
  double step = 0.5;
  // lo, lo + step, ..., hi (computed from integer multiples, so no drift).
  std::vector<double> ticks() const;
};

NiceScale nice_scale(double lo, double hi, int target = 5);

// A tick label with as many decimals as `step` needs ("0.25", "12000"),
// never "-0".
std::string format_tick(double value, double step);

}  // namespace kiln::viz
