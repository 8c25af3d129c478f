// `kiln example [NAME...] [--quick] [--list]`: runs the chapter's experiments
// (models/examples/examples.h), all of them without a NAME. Figures go to
// stdout as `name value unit` lines, context to stderr.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "ir/error.h"
#include "models/examples/examples.h"

namespace kiln::cli {

namespace {

struct ExampleArgs {
  std::vector<std::string> names;
  bool quick = false;
  bool list = false;
  std::vector<std::string> devices{"cpu:0", "cpu:1"};
};

void run_examples(const ExampleArgs& args) {
  const auto& all = examples::all();
  std::vector<std::string> known;
  for (const auto& e : all) known.push_back(e.name);
  for (const std::string& n : args.names) {
    KILN_CHECK(std::find(known.begin(), known.end(), n) != known.end(), ValueError,
               "example: no example named '{}' (examples: {})", n, fmt::join(known, ", "));
  }
  examples::Options options{.quick = args.quick, .devices = {}};
  for (const std::string& d : args.devices) options.devices.push_back(parse_device(d));
  KILN_CHECK(options.devices.size() == 2 && options.devices[0] != options.devices[1], ValueError,
             "example --devices: expected two different devices (the chapter's two GPUs), e.g. cpu:0,cpu:1 or "
             "cuda:0,cpu:0; got {}",
             fmt::join(args.devices, ","));
  for (const auto& e : all) {
    if (!args.names.empty() && std::find(args.names.begin(), args.names.end(), e.name) == args.names.end()) continue;
    if (args.list) {
      fmt::print("{:<14} d2l {:<7} {}\n", e.name, e.section, e.summary);
      continue;
    }
    fmt::print(stderr, "# {} (d2l {}): {}\n", e.name, e.section, e.summary);
    e.run(options);
  }
}

}  // namespace

void add_example_command(CLI::App& app) {
  auto args = std::make_shared<ExampleArgs>();
  CLI::App* cmd = app.add_subcommand("example", "Run the chapter's experiments; prints `name value unit` per figure");
  cmd->add_option("name", args->names, "Examples to run (all without one)");
  cmd->add_flag("--quick,-q", args->quick, "A smaller run of the same code (smoke tests)");
  cmd->add_flag("--list,-l", args->list, "List the examples instead of running them");
  cmd->add_option("--devices", args->devices, "The two devices (default cpu:0,cpu:1; with a GPU: cuda:0,cpu:0)")
      ->delimiter(',');
  cmd->callback([args] { run_examples(*args); });
}

}  // namespace kiln::cli
