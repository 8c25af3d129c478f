// `kiln bench [PREFIX...] [--repeat N] [--list]`: runs the benchmarks of
// bench/ whose name or figure names start with a PREFIX (all without one) and
// prints one line per figure: `name value unit`. Progress goes to stderr, so
// stdout stays machine-readable.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "ir/error.h"

namespace kiln::cli {

namespace {

struct BenchArgs {
  std::vector<std::string> prefixes;
  int repeat = 3;
  bool list = false;
};

void run_bench(const BenchArgs& args) {
  KILN_CHECK(args.repeat >= 1, ValueError, "bench: --repeat must be at least 1, got {}", args.repeat);
  bench::Options options{.repeat = args.repeat};
  int matched = 0;
  for (const bench::Benchmark& b : bench::registry()) {
    if (!bench::selected(b, args.prefixes)) continue;
    ++matched;
    if (args.list) {
      fmt::print("{}:", b.name);
      for (const std::string& f : b.figures) fmt::print(" {}", f);
      fmt::print("\n");
      continue;
    }
    fmt::print(stderr, "# {}\n", b.name);
    for (const bench::Figure& f : b.run(options)) fmt::print("{} {:.4g} {}\n", f.name, f.value, f.unit);
    std::fflush(stdout);
  }
  KILN_CHECK(matched > 0, ValueError, "bench: no benchmark matches '{}' (see kiln bench --list)",
             fmt::join(args.prefixes, "', '"));
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Run benchmarks; prints `name value unit` per figure");
  cmd->add_option("prefix", args->prefixes, "Run benchmarks whose name or a figure name starts with this");
  cmd->add_option("--repeat,-r", args->repeat, "Timed repeats per measurement (the best is reported)")
      ->capture_default_str();
  cmd->add_flag("--list,-l", args->list, "List benchmarks and their figures instead of running them");
  cmd->callback([args] { run_bench(*args); });
}

}  // namespace kiln::cli
