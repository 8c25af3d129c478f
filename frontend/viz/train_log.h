// Training logs: the JSON lines `kiln train --log FILE` writes, one object
// per epoch, read back for plotting (svg_plot.h).
//
//   TrainLog run = read_train_log("fp32.jsonl");          // label "fp32"
//   const std::vector<double>& acc = run.series.at("test_acc");
//
// The format: one JSON object per line; blank lines are skipped. Every line
// has a number "epoch" and a number "loss". The other fields Kiln plots are
// the keys of kTrainLogSeries; those that the first line has must be on every
// line. A value may be null (nlohmann-json writes a NaN loss as null): that
// point is NaN, a gap in the curve. Other fields ("seconds", ...) are
// ignored, so a log written by another framework in the same format plots too.
// An epoch not greater than the one before starts over from there (a resumed
// run appended to its log): the later lines replace the earlier ones.
//
// Errors are ValueError (IOError when the file cannot be read) naming the file
// and the 1-based line: "fp32.jsonl, line 3: no field 'loss' (every line
// needs 'epoch' and 'loss')". A log without any epoch is an error too: there is
// nothing to draw.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::viz {

// The panel a series is drawn in.
enum class LogPanel { kLoss, kAccuracy, kBitsPerByte, kThroughput };

struct LogSeriesInfo {
  std::string_view key;    // the JSON field
  std::string_view label;  // legend and axis text
  LogPanel panel;
  bool test = false;  // measured on held-out data (drawn dashed)
};

// Every series Kiln plots, in drawing order.
inline constexpr LogSeriesInfo kTrainLogSeries[] = {
    {"loss", "train loss", LogPanel::kLoss},
    {"test_loss", "test loss", LogPanel::kLoss, true},
    {"train_acc", "train accuracy", LogPanel::kAccuracy},
    {"test_acc", "test accuracy", LogPanel::kAccuracy, true},
    {"train_bits_per_byte", "train bits per byte", LogPanel::kBitsPerByte},
    {"test_bits_per_byte", "test bits per byte", LogPanel::kBitsPerByte, true},
    {"images_per_sec", "images/s", LogPanel::kThroughput},
    {"tokens_per_sec", "tokens/s", LogPanel::kThroughput},
};

struct TrainLog {
  std::string label;           // legend text: the file name without directory and extension
  std::vector<double> epochs;  // increasing
  // Key of kTrainLogSeries -> one value per epoch (NaN: no value), for the
  // series the log has ("loss" always).
  std::map<std::string, std::vector<double>> series;

  // Appends one epoch; `values` holds the series keys this log has (a new
  // log takes the keys of its first epoch). Same replacing rule as the file.
  void add_epoch(double epoch, const std::map<std::string, double>& values);
};

// Parses `text`; `source` names it in errors (the file name).
TrainLog parse_train_log(std::string_view text, const std::string& source);
// Reads and parses a file; the label is its stem ("runs/fp32.jsonl" -> "fp32").
TrainLog read_train_log(const std::string& path);

}  // namespace kiln::viz
