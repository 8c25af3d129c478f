// Helpers shared by the test programs.
//
//   std::string msg = error_of<ValueError>([&] { net(x); });   // fails the test unless ValueError is thrown
//   EXPECT_CONTAINS(msg, "Dense 'hidden'");
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace kiln::test {

// The message of the E that `f` throws; a test failure (and "") when it
// throws something else or nothing.
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception thrown";
  return "";
}

}  // namespace kiln::test

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "'" << needle << "' not in: " << (haystack)
