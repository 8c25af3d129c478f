// Uses an installed Kiln through <kiln/kiln.h> only; exits non-zero when a
// value is wrong, so the `install_consumer` test can fail.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using namespace kiln;
  try {
    NDArray a = nd::arange(6).reshape({2, 3});  // [[0 1 2] [3 4 5]]
    NDArray b = nd::ones({3, 2}) * 2 + 1;       // all 3
    NDArray c = nd::dot(a, b);                  // [[9 9] [36 36]]
    float total = nd::sum(c).item<float>();     // 90
    std::vector<float> v = c.to_vector<float>();
    const std::vector<float> expected{9, 9, 36, 36};
    if (v != expected || std::fabs(total - 90.0f) > 1e-5f) {
      std::fprintf(stderr, "consumer: wrong values: sum %g, c = %s\n", total, c.to_string().c_str());
      return 1;
    }
    std::printf("consumer: ok (sum %g)\n", total);
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
