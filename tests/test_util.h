// Helpers shared by the test programs.
//
//   std::string msg = error_of<ValueError>([&] { net(x); });   // fails the test unless ValueError is thrown
//   EXPECT_CONTAINS(msg, "Dense 'hidden'");
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "frontend/ndarray.h"

namespace kiln::test {

// True in the sanitizer build (cmake/KilnSanitize.cmake), where ASan makes
// compute-heavy tests several times slower: those take smaller sizes there,
// still covering every path they cover in the Release build.
#ifdef KILN_SANITIZE_BUILD
inline constexpr bool kSanitizeBuild = true;
#else
inline constexpr bool kSanitizeBuild = false;
#endif

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

// n floats uniform in [lo, hi) from a fixed 64-bit LCG: the same values on
// every platform and thread count, for kernel tests against references.
inline std::vector<float> uniform(int64_t n, double lo, double hi, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& f : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    f = static_cast<float>(lo + (hi - lo) * static_cast<double>(s >> 11) / 9007199254740992.0);
  }
  return v;
}
inline std::vector<float> uniform(int64_t n, uint64_t seed) { return uniform(n, -1, 1, seed); }

// Same shape, and every element within tol * (1 + |want|); names the index.
inline void expect_close(const NDArray& got, const NDArray& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " at flat index " << i;
  }
}

}  // namespace kiln::test

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "'" << needle << "' not in: " << (haystack)
