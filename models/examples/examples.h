// The chapter's experiments as runnable examples: `kiln example NAME`
// (frontend/cli/example.cc). Each prints its figures to stdout as
// `name value unit` lines (as `kiln bench` does) and a few words of context to
// stderr, and finishes in well under 30 s on a 2-core machine.
//
//   kiln example --list
//   kiln example multi_device        # d2l 12.3.1: the same work on cpu(0) and cpu(1)
//   kiln example dp_scratch --quick  # d2l 12.5, a smoke-test sized run
//
// cpu(0) and cpu(1) stand in for the chapter's two GPUs: each is a device
// with its own engine workers (runtime/engine.h), given one intra-op thread so
// that two devices use the machine's two cores. `--devices cuda:0,cpu:0`
// runs them on a GPU and the CPU (the chapter's gpu(0)/cpu(0) variants).
//
// Registration is explicit: all() lists the examples of this directory.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/device.h"

namespace kiln::examples {

struct Options {
  bool quick = false;  // a smaller run (smoke tests): same code path, fewer iterations
  // The two devices of the experiments (`--devices`): the chapter's two GPUs
  // are cpu(0) and cpu(1) here, and cuda(0), cpu(0) on a machine with one GPU.
  std::vector<Device> devices{Device::cpu(0), Device::cpu(1)};
};

struct Example {
  std::string name;
  std::string section;  // the chapter's section, "12.3.1"
  std::string summary;  // one line
  void (*run)(const Options& options) = nullptr;
};

const std::vector<Example>& all();

// Prints one figure: `name value unit`.
void report(std::string_view name, double value, std::string_view unit);

// One file per example.
void run_multi_device(const Options& options);  // multi_device.cc
void run_compute_copy(const Options& options);  // compute_copy.cc
void run_dp_scratch(const Options& options);    // dp_scratch.cc
void run_dp_concise(const Options& options);    // dp_concise.cc

}  // namespace kiln::examples
