// The `kiln` program: one subcommand per file in frontend/cli/.
//
//   kiln info                     what this build and machine have
//   kiln demo                     asynchronous execution and the profiler, in miniature
//   kiln bench [PREFIX...]        benchmarks, one `name value unit` line per figure
//   kiln train [--model ...]      train a model on Fashion-MNIST (the main job)
//   kiln inspect SYMBOL.json      ops, shapes and parameters of an MXNet symbol file
//   kiln run SYMBOL PARAMS ...    a forward pass of an MXNet export on .npy inputs
//   kiln example [NAME...]        the chapter's experiments (models/examples/)
//   kiln plot LOG.jsonl... -o F   training curves from --log files, as an SVG
//   kiln profile -- SUBCOMMAND    a subcommand's trace, per-op table and timeline
//
// A subcommand file defines add_<name>_command(CLI::App&), which adds the
// subcommand and its callback; main lists them below. Errors from Kiln are
// printed as `kiln: <message>` with exit status 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "ir/error.h"
#include "runtime/engine.h"

namespace kiln::cli {
void add_info_command(CLI::App& app);   // info.cc
void add_demo_command(CLI::App& app);   // demo.cc
void add_bench_command(CLI::App& app);  // bench.cc
void add_train_command(CLI::App& app);  // train.cc
void add_inspect_command(CLI::App& app);  // inspect.cc
void add_run_command(CLI::App& app);      // run.cc
void add_export_command(CLI::App& app);   // export.cc
void add_example_command(CLI::App& app);  // example.cc
void add_plot_command(CLI::App& app);     // plot.cc
void add_profile_command(CLI::App& app);  // profile.cc
void add_generate_command(CLI::App& app);  // generate.cc
}  // namespace kiln::cli

int main(int argc, char** argv) {
  CLI::App app{"Kiln: an asynchronous deep-learning runtime", "kiln"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln " KILN_VERSION);
  kiln::cli::add_info_command(app);
  kiln::cli::add_demo_command(app);
  kiln::cli::add_bench_command(app);
  kiln::cli::add_train_command(app);
  kiln::cli::add_inspect_command(app);
  kiln::cli::add_run_command(app);
  kiln::cli::add_export_command(app);
  kiln::cli::add_example_command(app);
  kiln::cli::add_plot_command(app);
  kiln::cli::add_profile_command(app);
  kiln::cli::add_generate_command(app);
  int status = 0;
  try {
    app.parse(argc, argv);  // runs the chosen subcommand's callback
  } catch (const CLI::ParseError& e) {
    status = app.exit(e);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln: %s\n", e.what());
    status = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: unexpected error: %s\n", e.what());
    status = 2;
  }
  // Finish queued work before exit() destroys static objects that kernels
  // use, after an error as well (a command that failed may have work queued).
  try {
    kiln::engine::wait_all();
  } catch (const std::exception& e) {
    if (status == 0) {
      std::fprintf(stderr, "kiln: %s\n", e.what());
      status = 1;
    }
  }
  return status;
}
