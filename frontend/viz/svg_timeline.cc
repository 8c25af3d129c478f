#include "frontend/viz/svg_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "frontend/viz/nice_scale.h"
#include "frontend/viz/svg_text.h"
#include "ir/error.h"

namespace kiln::viz {
namespace {

constexpr double kWidth = 1200, kLabelW = 190, kRightPad = 20;
constexpr double kTitleH = 40, kAxisH = 34, kBarH = 16, kRowGap = 8, kLegendRowH = 20;
constexpr size_t kLegendEntries = 12;

std::string_view base_name(std::string_view name) {
  size_t slash = name.rfind('/');
  return slash == std::string_view::npos ? name : name.substr(slash + 1);
}

// A colour per op name: FNV-1a of the name picks a hue (the same in every run).
std::string op_color(std::string_view name) {
  uint32_t h = 2166136261u;
  for (char c : base_name(name)) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  int hue = static_cast<int>(h % 360);
  int light = 45 + static_cast<int>((h >> 12) % 3) * 8;
  return fmt::format("hsl({},62%,{}%)", hue, light);
}

struct Row {
  std::string label;
  int max_depth = 0;
  double y = 0;
};

}  // namespace

std::string timeline_svg(const std::vector<TraceEvent>& events, const TimelineOptions& options) {
  KILN_ASSERT(!events.empty());
  KILN_CHECK(std::isfinite(options.start_ms) && std::isfinite(options.first_ms) && options.first_ms <= 1e12 &&
                 options.start_ms <= 1e12,
             ValueError, "timeline: start {} ms and length {} ms: expected numbers from 0 to 1e12", options.start_ms,
             options.first_ms);
  double t0 = events[0].start_us, t_end = events[0].start_us;
  for (const TraceEvent& e : events) {
    t0 = std::min(t0, e.start_us);
    t_end = std::max(t_end, e.start_us + e.dur_us);
  }
  // The window [t0, window_end), in trace time; the axis counts from `first`.
  const double first = t0;
  t0 += std::max(options.start_ms, 0.0) * 1e3;
  double window_us = options.first_ms > 0 ? options.first_ms * 1e3 : std::max(t_end - t0, 1.0);
  double window_end = t0 + window_us;

  // Rows, in (pid, lane, tid) order.
  std::map<std::tuple<int64_t, std::string, int64_t>, Row> rows;
  for (const TraceEvent& e : events) {
    Row& r = rows[{e.pid, e.lane, e.tid}];
    r.label = fmt::format("{} {} #{}", e.device, e.lane, e.tid);
    r.max_depth = std::max(r.max_depth, e.depth);
  }
  double y = kTitleH + kAxisH;
  for (auto& [key, r] : rows) {
    r.y = y;
    y += kBarH * (r.max_depth + 1) + kRowGap;
  }
  const double rows_end = y;

  // Legend: the ops with the most time inside the window.
  std::map<std::string, double> in_window;
  for (const TraceEvent& e : events) {
    double a = std::max(e.start_us, t0), b = std::min(e.start_us + e.dur_us, window_end);
    if (b > a || (e.start_us >= t0 && e.start_us < window_end)) in_window[std::string(base_name(e.name))] += b - a;
  }
  std::vector<std::pair<std::string, double>> legend(in_window.begin(), in_window.end());
  std::ranges::stable_sort(legend, [](const auto& a, const auto& b) { return a.second > b.second; });
  if (legend.size() > kLegendEntries) legend.resize(kLegendEntries);
  const size_t per_row = 4;
  const double legend_h = kLegendRowH * static_cast<double>((legend.size() + per_row - 1) / per_row) + 12;
  const double height = rows_end + legend_h + 10;

  const double x0 = kLabelW, plot_w = kWidth - kLabelW - kRightPad;
  auto px = [&](double us) { return x0 + (us - t0) / window_us * plot_w; };
  const double axis_lo = (t0 - first) / 1e3, axis_hi = axis_lo + window_us / 1e3;  // ms since the first event
  NiceScale ticks = nice_scale(axis_lo, axis_hi, 8);

  std::string out = svg_open(kWidth, height);
  out += fmt::format("<title>{}</title>\n", xml_escape(options.title));
  out += fmt::format(
      "<text class=\"title\" x=\"{}\" y=\"26\" font-size=\"17\" font-weight=\"bold\" "
      "text-anchor=\"middle\">{}</text>\n",
      svg_number(kWidth / 2), xml_escape(options.title));
  // Time axis along the top, with grid lines through the rows.
  out += fmt::format("<g class=\"axis\" data-t-min-ms=\"{}\" data-t-max-ms=\"{}\">\n", axis_lo, axis_hi);
  double axis_y = kTitleH + kAxisH - 6;
  for (double t : ticks.ticks()) {
    if (t < axis_lo - 1e-9 || t > axis_hi + 1e-9) continue;
    std::string x = svg_number(px(first + t * 1e3));
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#e0e0e0\"/>"
        "<text class=\"tick\" x=\"{0}\" y=\"{3}\" font-size=\"11\" text-anchor=\"middle\">{4}</text>\n",
        x, svg_number(axis_y), svg_number(rows_end), svg_number(axis_y - 6), xml_escape(format_tick(t, ticks.step)));
  }
  out +=
      fmt::format("<text class=\"axis-name\" x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"end\">time (ms)</text>\n",
                  svg_number(x0 - 16), svg_number(axis_y - 6));
  out += "</g>\n";

  for (const auto& [key, r] : rows) {
    double h = kBarH * (r.max_depth + 1);
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f7f7f7\"/>"
        "<text class=\"lane\" x=\"8\" y=\"{}\" font-size=\"12\" dominant-baseline=\"middle\">{}</text>\n",
        svg_number(x0), svg_number(r.y), svg_number(plot_w), svg_number(h), svg_number(r.y + kBarH / 2),
        xml_escape(r.label));
  }
  out += "<g class=\"events\">\n";
  for (const TraceEvent& e : events) {
    double a = std::max(e.start_us, t0), b = std::min(e.start_us + e.dur_us, window_end);
    bool overlaps = b > a || (e.start_us >= t0 && e.start_us < window_end);
    if (!overlaps) continue;
    const Row& r = rows.at({e.pid, e.lane, e.tid});
    double x = px(a), w = std::max(px(b) - x, 0.5);
    out += fmt::format(
        "<rect class=\"event\" data-name=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\">"
        "<title>{}: {:.3f} ms at {:.3f} ms</title></rect>\n",
        xml_escape(e.name), svg_number(x), svg_number(r.y + kBarH * e.depth + 1), svg_number(w), svg_number(kBarH - 2),
        op_color(e.name), xml_escape(e.name), e.dur_us / 1e3, (e.start_us - first) / 1e3);
    // The name on the bar when it fits (about 6.5 px per character at 11 px).
    if (w > 6.5 * static_cast<double>(e.name.size()) + 8)
      out += fmt::format(
          "<text class=\"event-label\" x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#ffffff\" "
          "dominant-baseline=\"middle\">{}</text>\n",
          svg_number(x + 4), svg_number(r.y + kBarH * e.depth + kBarH / 2), xml_escape(e.name));
  }
  out += "</g>\n<g class=\"legend\">\n";
  for (size_t i = 0; i < legend.size(); ++i) {
    double lx = 8 + (kWidth - 16) / per_row * static_cast<double>(i % per_row);
    double ly = rows_end + 6 + kLegendRowH * static_cast<double>(i / per_row);
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"12\" fill=\"{}\"/>"
        "<text class=\"legend-label\" x=\"{}\" y=\"{}\" font-size=\"12\" dominant-baseline=\"middle\">{} "
        "({:.3f} ms)</text>\n",
        svg_number(lx), svg_number(ly), op_color(legend[i].first), svg_number(lx + 20), svg_number(ly + 6),
        xml_escape(legend[i].first), legend[i].second / 1e3);
  }
  out += "</g>\n</svg>\n";
  return out;
}

}  // namespace kiln::viz
