#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "ir/error.h"
#include "runtime/storage.h"

namespace kiln::storage {
namespace {

TEST(Storage, RoundSize) {
  EXPECT_EQ(round_size(0), 64u);
  EXPECT_EQ(round_size(1), 64u);
  EXPECT_EQ(round_size(65), 128u);
  EXPECT_EQ(round_size(4096), 4096u);
  for (size_t s : {4097ul, 10000ul, 1ul << 20, (1ul << 20) + 1, 123456789ul}) {
    size_t r = round_size(s);
    EXPECT_GE(r, s);
    EXPECT_LE(r, s + s / 4 + 64) << s;  // at most 25% waste
  }
}

TEST(Storage, CachesAndCountsOnItsOwnDevice) {
  Pool& p = pool(Device::cpu(7));  // a device no other test uses
  Stats before = p.stats();
  Block a = p.alloc(1000);
  ASSERT_NE(a.ptr, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.ptr) % 64, 0u);
  std::memset(a.ptr, 1, 1000);
  EXPECT_EQ(p.stats().in_use, before.in_use + static_cast<int64_t>(a.size));
  p.free(a);
  EXPECT_EQ(p.stats().cached, before.cached + static_cast<int64_t>(a.size));
  Block b = p.alloc(1000);
  EXPECT_EQ(b.ptr, a.ptr);  // reused from the cache
  EXPECT_EQ(p.stats().num_cache_hits, before.num_cache_hits + 1);
  p.free(b);
  EXPECT_GT(p.release_cached(), 0);
  EXPECT_EQ(p.stats().cached, 0);
  EXPECT_GE(p.stats().peak_in_use, static_cast<int64_t>(a.size));
}

TEST(Storage, AMissBorrowsACachedBlockUpToTwiceItsSize) {
  Pool& p = pool(Device::cpu(5));  // a device no other test uses
  p.release_cached();
  Block big = p.alloc(1 << 20);
  p.free(big);
  Stats before = p.stats();
  Block near = p.alloc(700 << 10);  // no 700 KiB block cached: the 1 MiB one serves
  EXPECT_EQ(near.ptr, big.ptr);
  EXPECT_EQ(near.size, big.size);  // it keeps its class, and returns to it
  EXPECT_EQ(p.stats().num_system_allocs, before.num_system_allocs);
  EXPECT_EQ(p.stats().in_use - before.in_use, static_cast<int64_t>(big.size));
  p.free(near);
  Block small = p.alloc(400 << 10);  // under half of 1 MiB: from the system
  EXPECT_NE(small.ptr, big.ptr);
  EXPECT_EQ(small.size, round_size(400 << 10));
  EXPECT_EQ(p.stats().num_system_allocs, before.num_system_allocs + 1);
  p.free(small);
  p.release_cached();
}

TEST(Storage, OutOfMemoryFlushesCacheThenThrowsWithState) {
  Pool& p = pool(Device::cpu(6));
  p.release_cached();
  p.set_system_limit(1 << 20);
  Block a = p.alloc(600 << 10);
  p.free(a);  // cached: 600 KiB held from the system
  // Needs the cache flushed to fit under the limit.
  Block b = p.alloc(700 << 10);
  EXPECT_EQ(p.stats().cached, 0);
  try {
    p.alloc(900 << 10);
    FAIL();
  } catch (const OutOfMemory& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("921600"), std::string::npos) << msg;  // the request
    EXPECT_NE(msg.find("in use"), std::string::npos) << msg;  // the pool's state
    EXPECT_NE(msg.find("cpu(6)"), std::string::npos) << msg;
  }
  p.free(b);
  p.set_system_limit(-1);
  EXPECT_NO_THROW(p.free(p.alloc(900 << 10)));  // works again afterwards
}

}  // namespace
}  // namespace kiln::storage
