// An asynchronous kernel fault (an illegal address) surfaces as a kiln::Error
// naming the op at the next wait, with synchronous lanes (KILN_CUDA_LANES=sync,
// the debugging mode this test sets; asynchronous lanes report it at the next
// synchronization without the op's name). Its own program: the fault destroys
// the process's CUDA context, so no other GPU test may run after it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "frontend/nd.h"
#include "frontend/ndarray.h"
#include "runtime/engine.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

[[maybe_unused]] const bool kSyncLanes = [] { return setenv("KILN_CUDA_LANES", "sync", 1) == 0; }();

TEST(CudaFault, IllegalAddressSurfacesAtTheNextWaitWithTheOpName) {
  KILN_REQUIRE_CUDA();
  NDArray out = nd::zeros({4}, {.device = Device::cuda(0)});
  out.wait_to_read();
  engine::get().push([](engine::RunContext rc) { cuda::testing::launch_illegal_address(rc.stream); }, {},
                     {out.var()}, {.device = Device::cuda(0), .name = "faulty_kernel"});
  std::string msg = test::error_of<Error>([&] { out.wait_to_read(); });
  EXPECT_CONTAINS(msg, "faulty_kernel on cuda(0)");
  EXPECT_CONTAINS(msg, "cudaErrorIllegalAddress");
  EXPECT_CONTAINS(msg, "restart the process");
}

}  // namespace
}  // namespace kiln
