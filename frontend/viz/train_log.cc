#include "frontend/viz/train_log.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ir/error.h"

namespace kiln::viz {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Larger values are corrupt logs; the bound keeps axis arithmetic finite.
constexpr double kMaxMagnitude = 1e15;

// The value of `key` in `line` (NaN for null); throws naming `where` when it
// is missing or not a number.
double number_field(const nlohmann::json& line, std::string_view key, const std::string& where,
                    std::string_view why_needed) {
  auto it = line.find(key);
  KILN_CHECK(it != line.end(), ValueError, "{}: no field '{}' ({})", where, key, why_needed);
  if (it->is_null()) return kNaN;
  KILN_CHECK(it->is_number(), ValueError, "{}: field '{}' is {} ({}), expected a number", where, key, it->type_name(),
             it->dump());
  double v = it->get<double>();
  KILN_CHECK(std::abs(v) <= kMaxMagnitude, ValueError, "{}: field '{}' is {}, beyond what a chart shows (|v| <= {})",
             where, key, it->dump(), kMaxMagnitude);
  return v;
}

}  // namespace

void TrainLog::add_epoch(double epoch, const std::map<std::string, double>& values) {
  if (epochs.empty() && series.empty()) {
    for (const auto& [key, v] : values) series[key];
  }
  // A resumed run: drop the epochs from `epoch` on.
  size_t keep = epochs.size();
  while (keep > 0 && epochs[keep - 1] >= epoch) --keep;
  epochs.resize(keep);
  for (auto& [key, v] : series) v.resize(keep);
  epochs.push_back(epoch);
  for (auto& [key, v] : series) {
    auto it = values.find(key);
    v.push_back(it == values.end() ? kNaN : it->second);
  }
}

TrainLog parse_train_log(std::string_view text, const std::string& source) {
  TrainLog log;
  std::vector<std::string_view> keys;  // the series of the first line
  size_t first_line = 0, line_no = 0;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    std::string where = fmt::format("{}, line {}", source, line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw ValueError(fmt::format("{}: not JSON ({}); expected one JSON object per epoch", where, e.what()));
    }
    KILN_CHECK(j.is_object(), ValueError, "{}: expected a JSON object per epoch, found {}", where, j.type_name());
    constexpr std::string_view kNeeded = "every line needs 'epoch' and 'loss'";
    double epoch = number_field(j, "epoch", where, kNeeded);
    KILN_CHECK(std::isfinite(epoch), ValueError, "{}: field 'epoch' is null, expected a number", where);
    if (keys.empty()) {
      first_line = line_no;
      number_field(j, "loss", where, kNeeded);
      for (const LogSeriesInfo& s : kTrainLogSeries)
        if (j.contains(s.key)) keys.push_back(s.key);
    }
    std::map<std::string, double> values;
    for (std::string_view key : keys) {
      std::string why = key == "loss" ? std::string(kNeeded) : fmt::format("line {} has it", first_line);
      values[std::string(key)] = number_field(j, key, where, why);
    }
    log.add_epoch(epoch, values);
  }
  KILN_CHECK(!log.epochs.empty(), ValueError,
             "{}: the log is empty (no epochs); nothing to plot (expected one JSON object per epoch, as "
             "`kiln train --log` writes)",
             source);
  return log;
}

TrainLog read_train_log(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), IOError, "{}: cannot open the training log", path);
  std::ostringstream text;
  text << f.rdbuf();
  KILN_CHECK(!f.bad(), IOError, "{}: reading the training log failed", path);
  TrainLog log = parse_train_log(text.str(), path);
  log.label = std::filesystem::path(path).stem().string();
  return log;
}

}  // namespace kiln::viz
