// A fuzz target: one function that hands arbitrary bytes to one of Kiln's
// parsers of untrusted input. Each target file defines exactly one:
//
//   KILN_FUZZ_TARGET(npy) { (void)npy::parse(as_string_view(data), "fuzz input"); }
//
// The same file is linked into that target's libFuzzer program (<name>_fuzz,
// sanitizer builds with clang: tests/fuzz/fuzz_main.cc) and into
// fuzz_regressions_test (every build), which replays the committed crash
// inputs and seed corpora through it.
//
// The contract a target checks: the parser either returns, or throws a
// kiln::Error other than InternalError (a user error naming what was expected,
// what was found and where). Anything else (a sanitizer report, an
// InternalError, another exception type, a hang) is a bug.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::fuzz {

using Bytes = std::span<const uint8_t>;
using TargetFn = void (*)(Bytes);

struct Target {
  std::string name;
  TargetFn fn;
};

// Every target linked into this program, in registration order.
std::vector<Target>& targets();
bool register_target(const char* name, TargetFn fn);

inline std::string_view as_string_view(Bytes data) {
  return {reinterpret_cast<const char*>(data.data()), data.size()};
}

}  // namespace kiln::fuzz

#define KILN_FUZZ_TARGET(name)                                                                 \
  static void kiln_fuzz_target_##name(::kiln::fuzz::Bytes data);                              \
  [[maybe_unused]] static const bool kiln_fuzz_registered_##name =                            \
      ::kiln::fuzz::register_target(#name, kiln_fuzz_target_##name);                          \
  static void kiln_fuzz_target_##name(::kiln::fuzz::Bytes data)
