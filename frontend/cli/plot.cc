// kiln plot: training curves from `kiln train --log` files, as one SVG.
//
//   kiln plot fp32.jsonl bf16.jsonl --output curves.svg
//   kiln plot run.jsonl torch.jsonl --label kiln --label pytorch --title "LeNet, 10 epochs" -o cmp.svg
//
// One panel per quantity (loss, accuracy or bits per byte, throughput)
// against the epoch; several logs overlay, each in its colour, labelled by its
// file name or by the --label given in the same position. The picture is
// self-contained (open it in a browser) and written atomically. A bad line
// is an error naming the file and line; an empty log writes no picture.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "frontend/atomic_file.h"
#include "frontend/viz/svg_plot.h"
#include "ir/error.h"

namespace kiln::cli {
namespace {

struct PlotOptions {
  std::vector<std::string> logs;
  std::vector<std::string> labels;
  std::string output;
  std::string title = "Training curves";
};

void run_plot(const PlotOptions& opt) {
  KILN_CHECK(opt.labels.size() <= opt.logs.size(), ValueError, "{} --label values for {} log file(s)",
             opt.labels.size(), opt.logs.size());
  for (const std::string& log : opt.logs)
    KILN_CHECK(std::filesystem::weakly_canonical(log) != std::filesystem::weakly_canonical(opt.output), ValueError,
               "--output {} is one of the logs: the picture would replace it", opt.output);
  std::vector<viz::TrainLog> runs;
  for (size_t i = 0; i < opt.logs.size(); ++i) {
    runs.push_back(viz::read_train_log(opt.logs[i]));
    if (i < opt.labels.size()) runs.back().label = opt.labels[i];
  }
  write_file_atomically(opt.output, viz::training_curves_svg(runs, {.title = opt.title}));
  size_t epochs = 0;
  for (const viz::TrainLog& r : runs) epochs = std::max(epochs, r.epochs.size());
  std::printf("wrote %s (%zu run%s, up to %zu epochs)\n", opt.output.c_str(), runs.size(), runs.size() == 1 ? "" : "s",
              epochs);
}

}  // namespace

void add_plot_command(CLI::App& app) {
  auto opt = std::make_shared<PlotOptions>();
  CLI::App* cmd = app.add_subcommand("plot", "Draw training curves from `kiln train --log` files as an SVG");
  cmd->add_option("logs", opt->logs, "JSON-lines logs, one object per epoch (several overlay)")->required();
  cmd->add_option("-o,--output", opt->output, "The SVG file to write")->required();
  cmd->add_option("--label", opt->labels, "Legend text of the log in the same position (default: its file name)");
  cmd->add_option("--title", opt->title, "The picture's title")->capture_default_str();
  cmd->callback([opt] { run_plot(*opt); });
}

}  // namespace kiln::cli
