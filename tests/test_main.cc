// main() of every Kiln test program.
//
// After each test it waits for the engine: work a test pushed but never read
// finishes inside that test, its asynchronous errors (tests provoke some on
// purpose) are cleared rather than leaking into the next test's wait_all, and
// nothing is still running when exit() destroys the static objects of Kiln's
// libraries (oneDNN builds some lazily; a kernel running while they are torn
// down crashes).
#include <gtest/gtest.h>

#include "runtime/engine.h"

namespace {

class WaitForEngine : public testing::EmptyTestEventListener {
  void OnTestEnd(const testing::TestInfo&) override {
    try {
      kiln::engine::wait_all();
    } catch (const std::exception&) {  // the test's own: it checked what it expected
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  testing::UnitTest::GetInstance()->listeners().Append(new WaitForEngine);
  int rc = RUN_ALL_TESTS();
  try {
    kiln::engine::wait_all();
  } catch (...) {  // already reported per test
  }
  return rc;
}
