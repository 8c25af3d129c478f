// kiln profile: run another kiln subcommand with the profiler on, then
// summarize its trace and draw its timeline.
//
//   kiln profile -- train --epochs 1 --train-limit 2048
//   kiln profile --trace t.json --svg t.svg --first-ms 50 --top 10 -- run m-symbol.json m-0000.params --input
//   data=x.npy
//
// The subcommand runs as a child process of the same program with
// KILN_PROFILE=<--trace> (default kiln-profile.json), so it records every
// engine operation of the whole run; its output passes through. Then the
// trace is read back and a table printed per device and lane: each op's
// total time, count and share of the lane's busy time (frontend/viz/
// trace_summary.h), and --svg draws the lanes' timeline for the first
// --first-ms milliseconds, or those from --start-ms on
// (frontend/viz/svg_timeline.h). The trace opens in
// ui.perfetto.dev. A subcommand that fails makes this fail with its status.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "frontend/atomic_file.h"
#include "frontend/viz/svg_timeline.h"
#include "frontend/viz/trace_summary.h"
#include "ir/error.h"

extern char** environ;

namespace kiln::cli {
namespace {

struct ProfileOptions {
  std::string trace = "kiln-profile.json";
  std::string svg;
  double start_ms = 0;
  double first_ms = 100;
  size_t top = 15;
  std::vector<std::string> command;
};

// Runs this program with `args` and KILN_PROFILE=trace; returns its exit status.
int run_child(const std::vector<std::string>& args, const std::string& trace) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  KILN_CHECK(!ec, IOError, "cannot find this program (/proc/self/exe): {}", ec.message());
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "KILN_PROFILE=", 13) != 0) env_strings.emplace_back(*e);
  env_strings.push_back("KILN_PROFILE=" + trace);
  std::vector<char*> argv{const_cast<char*>(self.c_str())}, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), envp.data());
  KILN_CHECK(rc == 0, IOError, "cannot start {}: {}", self.string(), std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    KILN_CHECK(errno == EINTR, IOError, "waiting for the profiled command failed: {}", std::strerror(errno));
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

void run_profile(const ProfileOptions& opt) {
  KILN_CHECK(!opt.command.empty(), ValueError, "expected a kiln subcommand after `--` (e.g. kiln profile -- train)");
  KILN_CHECK(opt.command[0] != "profile", ValueError, "kiln profile cannot profile itself");
  KILN_CHECK(opt.first_ms >= 0, ValueError, "--first-ms {}: expected a number of milliseconds >= 0", opt.first_ms);
  KILN_CHECK(opt.start_ms >= 0, ValueError, "--start-ms {}: expected a number of milliseconds >= 0", opt.start_ms);
  std::filesystem::remove(opt.trace);  // so that a stale trace is never summarized
  std::string command = "kiln";
  for (const std::string& a : opt.command) command += " " + a;
  int status = run_child(opt.command, opt.trace);
  KILN_CHECK(status == 0, Error, "the profiled command `{}` failed (exit status {})", command, status);
  KILN_CHECK(std::filesystem::exists(opt.trace), Error,
             "the profiled command `{}` wrote no trace to {} (it ran no engine operation)", command, opt.trace);
  std::vector<viz::TraceEvent> events = viz::read_chrome_trace(opt.trace);
  KILN_CHECK(!events.empty(), Error, "{}: the trace of `{}` has no events", opt.trace, command);
  std::printf("\nprofile of `%s` (trace: %s)\n\n%s", command.c_str(), opt.trace.c_str(),
              viz::summary_table(viz::summarize_trace(events), opt.top).c_str());
  if (!opt.svg.empty()) {
    std::string span = opt.first_ms > 0 ? fmt::format("{} ms", opt.first_ms) : "the rest of the run";
    std::string title = opt.start_ms > 0   ? fmt::format("kiln {}: {} from {} ms", opt.command[0], span, opt.start_ms)
                        : opt.first_ms > 0 ? fmt::format("kiln {}: the first {} ms", opt.command[0], opt.first_ms)
                                           : fmt::format("kiln {}: the whole run", opt.command[0]);
    write_file_atomically(
        opt.svg, viz::timeline_svg(events, {.start_ms = opt.start_ms, .first_ms = opt.first_ms, .title = title}));
    std::printf("wrote %s\n", opt.svg.c_str());
  }
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto opt = std::make_shared<ProfileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "Run a kiln subcommand with the profiler on: trace, per-op table per lane, SVG timeline");
  cmd->add_option("--trace", opt->trace, "The Chrome/Perfetto trace to write")->capture_default_str();
  cmd->add_option("--svg", opt->svg, "Draw the lanes' timeline as an SVG FILE");
  cmd->add_option("--first-ms", opt->first_ms, "The timeline's length in ms (0: to the end)")
      ->capture_default_str();
  cmd->add_option("--start-ms", opt->start_ms, "Where the timeline starts, in ms after the first event")
      ->capture_default_str();
  cmd->add_option("--top", opt->top, "Ops listed per lane (the rest on one line; 0: all)")->capture_default_str();
  cmd->add_option("command", opt->command, "The subcommand and its arguments, after `--`")->required();
  cmd->callback([opt] { run_profile(*opt); });
}

}  // namespace kiln::cli
