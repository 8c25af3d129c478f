#include "frontend/viz/trace_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ir/error.h"

namespace kiln::viz {
namespace {

// About 30 years: larger times are a corrupt trace (and would overflow the
// timeline's arithmetic).
constexpr double kMaxMicroseconds = 1e15;

// nlohmann's out_of_range errors (a number too large for a double) quote the
// number but not its place: ", line L, column C" of its first occurrence.
std::string where_in_text(std::string_view text, std::string_view what) {
  size_t open = what.find('\''), close = what.rfind('\'');
  if (open == std::string_view::npos || close <= open + 1) return "";
  size_t at = text.find(what.substr(open + 1, close - open - 1));
  if (at == std::string_view::npos) return "";
  size_t line_start = text.rfind('\n', at);
  line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
  size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
  return fmt::format(", line {}, column {}", line, at - line_start + 1);
}

// e[key] when it is a string, else "".
std::string string_field(const nlohmann::json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::vector<TraceEvent> parse_chrome_trace(std::string_view text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {  // says where
    throw ValueError(fmt::format("{}: not JSON ({}); expected a Chrome trace", source, e.what()));
  } catch (const nlohmann::json::exception& e) {  // a number out of range: find it
    throw ValueError(fmt::format("{}{}: {}; expected a Chrome trace", source, where_in_text(text, e.what()), e.what()));
  }
  const nlohmann::json* list = &j;
  if (j.is_object()) {
    auto it = j.find("traceEvents");
    KILN_CHECK(it != j.end() && it->is_array(), ValueError,
               "{}: expected a Chrome trace (an object with a "
               "\"traceEvents\" array), found an object without one",
               source);
    list = &*it;
  }
  KILN_CHECK(list->is_array(), ValueError, "{}: expected a Chrome trace, found {}", source, j.type_name());

  std::map<int64_t, std::string> process_names;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  std::vector<TraceEvent> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& e = (*list)[i];
    auto where = [&] { return fmt::format("{}: event {}", source, i); };
    KILN_CHECK(e.is_object(), ValueError, "{}: expected an object, found {}", where(), e.type_name());
    std::string ph = string_field(e, "ph");
    auto number = [&](const char* key) {
      auto it = e.find(key);
      KILN_CHECK(it != e.end() && it->is_number(), ValueError, "{} (\"ph\":\"{}\"): no number '{}'", where(), ph, key);
      return it->get<double>();
    };
    auto integer = [&](const char* key) {
      auto it = e.find(key);
      KILN_CHECK(it != e.end() && it->is_number_integer(), ValueError, "{} (\"ph\":\"{}\"): no integer '{}'", where(),
                 ph, key);
      return it->get<int64_t>();
    };
    if (ph == "M") {
      auto args = e.find("args");
      if (args == e.end() || !args->is_object() || !args->contains("name") || !(*args)["name"].is_string()) continue;
      std::string name = (*args)["name"].get<std::string>();
      if (string_field(e, "name") == "process_name") process_names[integer("pid")] = name;
      if (string_field(e, "name") == "thread_name") thread_names[{integer("pid"), integer("tid")}] = name;
      continue;
    }
    if (ph != "X") continue;
    TraceEvent t;
    auto name = e.find("name");
    KILN_CHECK(name != e.end() && name->is_string(), ValueError, "{}: no string 'name'", where());
    t.name = name->get<std::string>();
    t.pid = integer("pid");
    t.tid = integer("tid");
    t.start_us = number("ts");
    t.dur_us = number("dur");
    KILN_CHECK(t.dur_us >= 0 && t.dur_us <= kMaxMicroseconds, ValueError, "{}: duration {} out of range [0, {}]",
               where(), t.dur_us, kMaxMicroseconds);
    KILN_CHECK(std::abs(t.start_us) <= kMaxMicroseconds, ValueError, "{}: timestamp {} out of range [-{}, {}]", where(),
               t.start_us, kMaxMicroseconds, kMaxMicroseconds);
    out.push_back(std::move(t));
  }
  for (TraceEvent& t : out) {
    auto p = process_names.find(t.pid);
    t.device = p != process_names.end() ? p->second : fmt::format("pid {}", t.pid);
    auto th = thread_names.find({t.pid, t.tid});
    t.lane = th != thread_names.end() ? th->second : fmt::format("tid {}", t.tid);
  }
  // Depths: per thread, by start (longer first on ties), a stack of ends.
  std::vector<size_t> order(out.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::ranges::stable_sort(order, [&](size_t a, size_t b) {
    const TraceEvent &x = out[a], &y = out[b];
    if (x.pid != y.pid) return x.pid < y.pid;
    if (x.tid != y.tid) return x.tid < y.tid;
    if (x.start_us != y.start_us) return x.start_us < y.start_us;
    return x.dur_us > y.dur_us;
  });
  std::vector<double> ends;
  for (size_t k = 0; k < order.size(); ++k) {
    TraceEvent& t = out[order[k]];
    if (k == 0 || out[order[k - 1]].pid != t.pid || out[order[k - 1]].tid != t.tid) ends.clear();
    // Inside an event when it starts before that one's end (timestamps are
    // rounded to nanoseconds: an event that starts at another's end is not inside).
    while (!ends.empty() && t.start_us >= ends.back() - 1e-4) ends.pop_back();
    t.depth = static_cast<int>(ends.size());
    ends.push_back(t.start_us + t.dur_us);
  }
  return out;
}

std::vector<TraceEvent> read_chrome_trace(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), IOError, "{}: cannot open the trace", path);
  std::ostringstream text;
  text << f.rdbuf();
  KILN_CHECK(!f.bad(), IOError, "{}: reading the trace failed", path);
  return parse_chrome_trace(text.str(), path);
}

std::vector<LaneSummary> summarize_trace(const std::vector<TraceEvent>& events) {
  std::map<std::pair<std::string, std::string>, LaneSummary> lanes;
  std::map<std::pair<std::string, std::string>, std::map<std::string, OpSummary>> ops;
  for (const TraceEvent& e : events) {
    LaneSummary& l = lanes[{e.device, e.lane}];
    l.device = e.device;
    l.lane = e.lane;
    l.total_us += e.dur_us;
    ++l.events;
    if (e.depth == 0) l.busy_us += e.dur_us;
    OpSummary& o = ops[{e.device, e.lane}][e.name];
    if (o.count == 0) o.depth = e.depth;
    o.name = e.name;
    o.total_us += e.dur_us;
    ++o.count;
    o.depth = std::min(o.depth, e.depth);
  }
  std::vector<LaneSummary> out;
  for (auto& [key, l] : lanes) {
    for (auto& [name, o] : ops[key]) {
      o.share = l.busy_us > 0 ? o.total_us / l.busy_us : 0;
      l.ops.push_back(o);
    }
    std::ranges::stable_sort(l.ops, [](const OpSummary& a, const OpSummary& b) { return a.total_us > b.total_us; });
    out.push_back(std::move(l));
  }
  return out;
}

std::string summary_table(const std::vector<LaneSummary>& lanes, size_t top) {
  std::string out;
  double all_us = 0;
  int64_t all_events = 0;
  for (const LaneSummary& l : lanes) {
    out += fmt::format("{} {}: {} events, busy {:.3f} ms\n", l.device, l.lane, l.events, l.busy_us / 1e3);
    out += fmt::format("  {:<40} {:>12} {:>8} {:>7}\n", "op", "total ms", "count", "share");
    size_t shown = top == 0 ? l.ops.size() : std::min(top, l.ops.size());
    for (size_t i = 0; i < shown; ++i) {
      const OpSummary& o = l.ops[i];
      std::string name = std::string(2 * static_cast<size_t>(o.depth), ' ') + o.name;
      out += fmt::format("  {:<40} {:>12.3f} {:>8} {:>6.1f}%\n", name, o.total_us / 1e3, o.count, 100 * o.share);
    }
    if (shown < l.ops.size()) {
      double rest_us = 0;
      int64_t rest_count = 0;
      for (size_t i = shown; i < l.ops.size(); ++i) {
        rest_us += l.ops[i].total_us;
        rest_count += l.ops[i].count;
      }
      out += fmt::format("  {:<40} {:>12.3f} {:>8}\n", fmt::format("({} other ops)", l.ops.size() - shown),
                         rest_us / 1e3, rest_count);
    }
    out += fmt::format("  {:<40} {:>12.3f} {:>8}\n\n", "total (nested events included)", l.total_us / 1e3, l.events);
    all_us += l.total_us;
    all_events += l.events;
  }
  out += fmt::format("all lanes: {} events, {:.3f} ms\n", all_events, all_us / 1e3);
  return out;
}

}  // namespace kiln::viz
