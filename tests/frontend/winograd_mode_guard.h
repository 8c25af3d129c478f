// Sets the Winograd mode (backends/cpu/conv_winograd.h) for a scope, for
// tests that compare Winograd with the direct convolutions.
#pragma once

#include "backends/cpu/conv_winograd.h"

namespace kiln::test {

class WinogradModeGuard {
 public:
  explicit WinogradModeGuard(int mode) : saved_(cpu::winograd_set_mode(mode)) {}
  ~WinogradModeGuard() { cpu::winograd_set_mode(saved_); }
  WinogradModeGuard(const WinogradModeGuard&) = delete;
  WinogradModeGuard& operator=(const WinogradModeGuard&) = delete;

 private:
  int saved_;
};

}  // namespace kiln::test
