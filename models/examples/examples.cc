#include "models/examples/examples.h"

#include <cstdio>

#include <fmt/format.h>

namespace kiln::examples {

const std::vector<Example>& all() {
  static const std::vector<Example> list = {
      {"multi_device", "12.3.1", "the same 10 matrix products on cpu(0) and cpu(1), with and without a wait between",
       &run_multi_device},
      {"compute_copy", "12.3.2", "compute then copy to another device, against copying each result as it is ready",
       &run_compute_copy},
      {"dp_scratch", "12.5", "data-parallel LeNet from scratch: hand-written allreduce and split_and_load",
       &run_dp_scratch},
      {"dp_concise", "12.6", "data-parallel LeNet with the Trainer over [cpu(0), cpu(1)] against one device",
       &run_dp_concise},
  };
  return list;
}

void report(std::string_view name, double value, std::string_view unit) {
  fmt::print("{} {:.4g} {}\n", name, value, unit);
  std::fflush(stdout);
}

}  // namespace kiln::examples
