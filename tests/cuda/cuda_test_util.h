// Shared by the CUDA test programs: skip with one line when there is no GPU.
//
//   TEST(CudaRuntime, Something) { KILN_REQUIRE_CUDA(); ... }
#pragma once

#include <gtest/gtest.h>

#include "backends/cuda/testing.h"
#include "ir/device.h"
#include "runtime/device_backend.h"

#define KILN_REQUIRE_CUDA()                                                                                            \
  do {                                                                                                                 \
    if (::kiln::device_count(::kiln::DeviceKind::kCUDA) == 0) GTEST_SKIP() << ::kiln::cuda::testing::no_device_line(); \
  } while (0)
