#include "frontend/viz/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "frontend/viz/nice_scale.h"
#include "frontend/viz/svg_text.h"
#include "ir/error.h"

namespace kiln::viz {
namespace {

// Geometry in pixels.
constexpr double kPanelW = 300, kPanelH = 210;                      // the plotting area
constexpr double kLeft = 64, kRight = 20, kTop = 34, kBottom = 44;  // around it
constexpr double kTitleH = 40, kLegendRowH = 22, kMargin = 12;
constexpr size_t kMaxDotted = 40;  // draw a dot per epoch up to this many epochs

struct PanelInfo {
  LogPanel panel;
  std::string_view id;
  std::string_view title;
};

constexpr PanelInfo kPanels[] = {
    {LogPanel::kLoss, "loss", "Loss"},
    {LogPanel::kAccuracy, "accuracy", "Accuracy"},
    {LogPanel::kBitsPerByte, "bits_per_byte", "Bits per byte"},
    {LogPanel::kThroughput, "throughput", "Throughput"},
};

// The y axis name with its unit: the series' labels for throughput (images/s,
// tokens/s), a fixed name otherwise.
std::string y_axis_name(LogPanel p, std::span<const TrainLog> runs) {
  switch (p) {
    case LogPanel::kLoss:
      return "loss (mean cross-entropy, nats)";
    case LogPanel::kAccuracy:
      return "accuracy (fraction correct)";
    case LogPanel::kBitsPerByte:
      return "bits per byte";
    case LogPanel::kThroughput:
      break;
  }
  std::string units;
  for (const LogSeriesInfo& s : kTrainLogSeries) {
    if (s.panel != p) continue;
    bool present = std::ranges::any_of(runs, [&](const TrainLog& r) { return r.series.contains(std::string(s.key)); });
    if (present) units += fmt::format("{}{}", units.empty() ? "" : ", ", s.label);
  }
  return "throughput (" + units + ")";
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

// The x scale: whole epochs, ticks at least 1 apart.
NiceScale epoch_scale(Range r) {
  NiceScale s = nice_scale(r.lo, r.hi, 6);
  if (s.step < 1) {
    s.step = 1;
    s.lo = std::floor(r.lo);
    s.hi = std::max(std::ceil(r.hi), s.lo + 1);
  }
  return s;
}

class PanelWriter {
 public:
  PanelWriter(double x0, double y0, NiceScale xs, NiceScale ys) : x0_(x0), y0_(y0), xs_(xs), ys_(ys) {}
  double px(double x) const { return x0_ + (x - xs_.lo) / (xs_.hi - xs_.lo) * kPanelW; }
  double py(double y) const { return y0_ + kPanelH - (y - ys_.lo) / (ys_.hi - ys_.lo) * kPanelH; }

  std::string axes(std::string_view title, std::string_view y_name) const {
    std::string out;
    // Grid and ticks.
    for (double t : ys_.ticks()) {
      std::string y = svg_number(py(t));
      out += fmt::format(
          "<line class=\"grid\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#e6e6e6\"/>"
          "<line x1=\"{3}\" y1=\"{1}\" x2=\"{0}\" y2=\"{1}\" stroke=\"#333333\"/>"
          "<text class=\"tick\" x=\"{4}\" y=\"{1}\" font-size=\"11\" text-anchor=\"end\" "
          "dominant-baseline=\"middle\">{5}</text>\n",
          svg_number(x0_), y, svg_number(x0_ + kPanelW), svg_number(x0_ - 5), svg_number(x0_ - 8),
          xml_escape(format_tick(t, ys_.step)));
    }
    for (double t : xs_.ticks()) {
      std::string x = svg_number(px(t));
      double bottom = y0_ + kPanelH;
      out += fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#333333\"/>"
          "<text class=\"tick\" x=\"{0}\" y=\"{3}\" font-size=\"11\" text-anchor=\"middle\">{4}</text>\n",
          x, svg_number(bottom), svg_number(bottom + 5), svg_number(bottom + 18), xml_escape(format_tick(t, xs_.step)));
    }
    // The frame, the axis names and the panel title.
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333333\"/>\n",
                       svg_number(x0_), svg_number(y0_), svg_number(kPanelW), svg_number(kPanelH));
    out += fmt::format(
        "<text class=\"axis-name\" x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">epoch</text>\n",
        svg_number(x0_ + kPanelW / 2), svg_number(y0_ + kPanelH + 36));
    double yc = y0_ + kPanelH / 2, xl = x0_ - 50;
    out += fmt::format(
        "<text class=\"axis-name\" x=\"{0}\" y=\"{1}\" font-size=\"12\" text-anchor=\"middle\" "
        "transform=\"rotate(-90 {0} {1})\">{2}</text>\n",
        svg_number(xl), svg_number(yc), xml_escape(y_name));
    out += fmt::format(
        "<text class=\"panel-title\" x=\"{}\" y=\"{}\" font-size=\"14\" font-weight=\"bold\" "
        "text-anchor=\"middle\">{}</text>\n",
        svg_number(x0_ + kPanelW / 2), svg_number(y0_ - 12), xml_escape(title));
    return out;
  }

  std::string curve(const TrainLog& run, const LogSeriesInfo& s, std::string_view color) const {
    const std::vector<double>& v = run.series.at(std::string(s.key));
    std::string d, dots;
    bool pen_down = false;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) {
        pen_down = false;
        continue;
      }
      std::string x = svg_number(px(run.epochs[i])), y = svg_number(py(v[i]));
      d += fmt::format("{}{} {} ", pen_down ? "L" : "M", x, y);
      pen_down = true;
      if (v.size() <= kMaxDotted)
        dots += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{}\"/>", x, y, color);
    }
    if (!d.empty()) d.pop_back();
    return fmt::format(
        "<path class=\"curve\" data-run=\"{}\" data-series=\"{}\" d=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-width=\"2\"{}/>\n{}{}",
        xml_escape(run.label), s.key, d.empty() ? "M0 0" : d, color, s.test ? " stroke-dasharray=\"6 4\"" : "", dots,
        dots.empty() ? "" : "\n");
  }

 private:
  double x0_, y0_;
  NiceScale xs_, ys_;
};

}  // namespace

std::string_view run_color(size_t i) {
  static constexpr std::string_view kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                                 "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  return kColors[i % std::size(kColors)];
}

std::string training_curves_svg(std::span<const TrainLog> runs, const PlotOptions& options) {
  KILN_ASSERT(!runs.empty());
  Range epochs;
  for (const TrainLog& r : runs) {
    KILN_ASSERT(!r.epochs.empty());
    for (double e : r.epochs) epochs.add(e);
  }
  NiceScale xs = epoch_scale(epochs);

  // The panels some run has a series of.
  std::vector<const PanelInfo*> panels;
  for (const PanelInfo& p : kPanels) {
    bool present = std::ranges::any_of(kTrainLogSeries, [&](const LogSeriesInfo& s) {
      return s.panel == p.panel &&
             std::ranges::any_of(runs, [&](const TrainLog& r) { return r.series.contains(std::string(s.key)); });
    });
    if (present) panels.push_back(&p);
  }

  const double cell_w = kLeft + kPanelW + kRight, cell_h = kTop + kPanelH + kBottom;
  // The legend: one entry per run, then one per line style in use.
  bool any_test = std::ranges::any_of(kTrainLogSeries, [&](const LogSeriesInfo& s) {
    return s.test &&
           std::ranges::any_of(runs, [&](const TrainLog& r) { return r.series.contains(std::string(s.key)); });
  });
  const double width = std::max<double>(2 * kMargin + cell_w * static_cast<double>(panels.size()), 480);
  const double entry_w = 180;
  const size_t per_row = std::max<size_t>(1, static_cast<size_t>((width - 2 * kMargin) / entry_w));
  const size_t entries = runs.size() + (any_test ? 2 : 0);
  const size_t legend_rows = (entries + per_row - 1) / per_row;
  const double height = kTitleH + cell_h + kLegendRowH * static_cast<double>(legend_rows) + kMargin + 6;

  std::string out = svg_open(width, height);
  out += fmt::format("<title>{}</title>\n", xml_escape(options.title));
  out += fmt::format(
      "<text class=\"title\" x=\"{}\" y=\"26\" font-size=\"18\" font-weight=\"bold\" "
      "text-anchor=\"middle\">{}</text>\n",
      svg_number(width / 2), xml_escape(options.title));

  for (size_t k = 0; k < panels.size(); ++k) {
    const PanelInfo& p = *panels[k];
    Range ys;
    for (const TrainLog& r : runs)
      for (const LogSeriesInfo& s : kTrainLogSeries)
        if (s.panel == p.panel)
          if (auto it = r.series.find(std::string(s.key)); it != r.series.end())
            for (double v : it->second) ys.add(v);
    if (ys.empty()) ys.add(0);  // every value NaN: an empty panel with an axis
    NiceScale yscale = nice_scale(ys.lo, ys.hi, 5);
    double x0 = kMargin + cell_w * static_cast<double>(k) + kLeft, y0 = kTitleH + kTop;
    PanelWriter w(x0, y0, xs, yscale);
    out += fmt::format(
        "<g class=\"panel\" data-panel=\"{}\" data-x-min=\"{}\" data-x-max=\"{}\" "
        "data-y-min=\"{}\" data-y-max=\"{}\">\n",
        p.id, xs.lo, xs.hi, yscale.lo, yscale.hi);
    out += w.axes(p.title, y_axis_name(p.panel, runs));
    for (size_t r = 0; r < runs.size(); ++r)
      for (const LogSeriesInfo& s : kTrainLogSeries)
        if (s.panel == p.panel && runs[r].series.contains(std::string(s.key))) out += w.curve(runs[r], s, run_color(r));
    out += "</g>\n";
  }

  // Legend.
  out += "<g class=\"legend\">\n";
  double ly = kTitleH + cell_h + 6;
  for (size_t i = 0; i < entries; ++i) {
    double x = kMargin + entry_w * static_cast<double>(i % per_row);
    double y = ly + kLegendRowH * static_cast<double>(i / per_row) + kLegendRowH / 2;
    std::string color = i < runs.size() ? std::string(run_color(i)) : "#333333";
    bool dashed = i == runs.size() + 1;
    std::string label = i < runs.size() ? runs[i].label : dashed ? "test (held-out data)" : "train";
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"{4}/>"
        "<text class=\"legend-label\" x=\"{5}\" y=\"{1}\" font-size=\"12\" dominant-baseline=\"middle\">{6}</text>\n",
        svg_number(x), svg_number(y), svg_number(x + 28), color, dashed ? " stroke-dasharray=\"6 4\"" : "",
        svg_number(x + 34), xml_escape(label));
  }
  out += "</g>\n</svg>\n";
  return out;
}

}  // namespace kiln::viz
