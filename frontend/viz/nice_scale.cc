#include "frontend/viz/nice_scale.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ir/error.h"

namespace kiln::viz {
namespace {

// The smallest of 1, 2, 2.5, 5, 10 times a power of ten that is >= x > 0.
double nice_step(double x) {
  double p = std::pow(10.0, std::floor(std::log10(x)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= x * (1 - 1e-9)) return m * p;
  return 10 * p;
}

}  // namespace

std::vector<double> NiceScale::ticks() const {
  std::vector<double> out;
  long first = std::lround(lo / step), last = std::lround(hi / step);
  for (long k = first; k <= last; ++k) out.push_back(static_cast<double>(k) * step);
  return out;
}

NiceScale nice_scale(double lo, double hi, int target) {
  KILN_ASSERT(std::isfinite(lo) && std::isfinite(hi) && lo <= hi && target >= 1);
  if (hi - lo <= 1e-12 * std::max(1.0, std::abs(hi))) {
    // One value v: an axis from 0 to 2v (or 2v to 0), or -1..1 at 0.
    double v = lo;
    lo = v > 0 ? 0 : v < 0 ? 2 * v : -1;
    hi = v > 0 ? 2 * v : v < 0 ? 0 : 1;
  }
  NiceScale s;
  s.step = nice_step((hi - lo) / target);
  s.lo = std::floor(lo / s.step + 1e-9) * s.step;
  s.hi = std::ceil(hi / s.step - 1e-9) * s.step;
  if (s.lo == 0) s.lo = 0;  // no -0
  return s;
}

std::string format_tick(double value, double step) {
  int decimals = 0;
  // Decimals needed so that every multiple of `step` prints exactly.
  while (decimals < 9 && std::abs(step * std::pow(10.0, decimals) - std::round(step * std::pow(10.0, decimals))) >
                             1e-6 * step * std::pow(10.0, decimals))
    ++decimals;
  std::string s = fmt::format("{:.{}f}", value, decimals);
  if (s.find_first_not_of("-0.") == std::string::npos) return decimals ? fmt::format("{:.{}f}", 0.0, decimals) : "0";
  return s;
}

}  // namespace kiln::viz
