// Chrome traces (frontend/viz/trace_summary.cc), as `kiln profile` reads
// them: parse, then summarize and draw what parsed.
#include "frontend/viz/svg_timeline.h"
#include "frontend/viz/trace_summary.h"
#include "tests/fuzz/fuzz_target.h"

namespace kiln {

KILN_FUZZ_TARGET(chrome_trace) {
  std::vector<viz::TraceEvent> events = viz::parse_chrome_trace(fuzz::as_string_view(data), "fuzz input");
  (void)viz::summary_table(viz::summarize_trace(events), 3);
  if (!events.empty()) (void)viz::timeline_svg(events, {.first_ms = 1});
}

}  // namespace kiln
