// Training curves as one self-contained SVG: a panel per quantity (loss,
// accuracy or bits per byte, throughput) against the epoch, every run
// overlaid in its own colour, train solid and test dashed, with a legend.
//
//   std::vector<TrainLog> runs = {read_train_log("fp32.jsonl"), read_train_log("bf16.jsonl")};
//   write_file_atomically("curves.svg", training_curves_svg(runs, {.title = "LeNet"}));
//
// A panel is drawn when some run has one of its series (train_log.h,
// kTrainLogSeries); a run without that series is absent from that panel.
// Each run x series the run has is one <path class="curve"> with
// data-run and data-series attributes (a gap where a value is NaN) and dots
// at the epochs when there are at most 40; each panel is a
// <g class="panel" data-panel="loss" data-x-min data-x-max data-y-min
// data-y-max> whose ranges are nice_scale() of the data it shows, with
// ticks, tick labels, the axis names with units and a panel title. The
// picture refers to nothing outside itself (no fonts, scripts or images).
// `runs` must not be empty and each run must have an epoch (read_train_log
// guarantees that); an internal error otherwise.
#pragma once

#include <span>
#include <string>

#include "frontend/viz/train_log.h"

namespace kiln::viz {

struct PlotOptions {
  std::string title = "Training curves";
};

std::string training_curves_svg(std::span<const TrainLog> runs, const PlotOptions& options = {});

// The colour of the i-th run ("#1f77b4"-style), shared by every Kiln chart.
std::string_view run_color(size_t i);

}  // namespace kiln::viz
