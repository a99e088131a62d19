// Large allocations (AllocateLarge) and the containers on them: huge-page alignment from the
// threshold on, ordinary memory below it, contents kept across a vector's growth from small to
// large, and ReusedBuffer's growth and moves.
#include "base/large_alloc.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "base/reused_buffer.h"
#include "base/uninit_vector.h"

namespace dcr {
namespace {

bool AlignedTo(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

TEST(AllocateLarge, LargeBlocksAreHugePageAlignedAndWholeSmallOnesOrdinary) {
  for (size_t bytes : {kLargeAllocBytes, kLargeAllocBytes + 1, 3 * kLargeAllocBytes + 4096}) {
    auto* p = static_cast<uint8_t*>(AllocateLarge(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(AlignedTo(p, kLargeAllocBytes)) << bytes;
    std::memset(p, 0xa5, bytes);  // every byte is ours (ASan and valgrind would see an overrun)
    EXPECT_EQ(p[0], 0xa5);
    EXPECT_EQ(p[bytes - 1], 0xa5);
    FreeLarge(p, bytes);
  }
  for (size_t bytes : {size_t{1}, size_t{4096}, kLargeAllocBytes - 1}) {
    auto* p = static_cast<uint8_t*>(AllocateLarge(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(AlignedTo(p, __STDCPP_DEFAULT_NEW_ALIGNMENT__)) << bytes;
    std::memset(p, 0x5a, bytes);
    FreeLarge(p, bytes);
  }
}

TEST(UninitVector, KeepsItsContentsAsItGrowsIntoLargeBlocks) {
  UninitVector<uint32_t> v;
  const size_t n = 3 * kLargeAllocBytes / sizeof(uint32_t);  // ends in a large block
  for (size_t have = 0; have < n;) {  // grown a piece at a time, as a diff grows its outputs
    const size_t more = std::min<size_t>(4096 + 17, n - have);
    v.resize(have + more);
    for (size_t i = have; i < have + more; ++i) v[i] = static_cast<uint32_t>(i * 2654435761u);
    have += more;
  }
  EXPECT_TRUE(AlignedTo(v.data(), kLargeAllocBytes));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], static_cast<uint32_t>(i * 2654435761u)) << i;
  UninitVector<uint32_t> w = v;  // a copy allocates and frees through the same allocator
  EXPECT_EQ(w, v);
}

TEST(ReusedBuffer, GrowsOnlyWhenAskedForMoreAndMovesItsRoom) {
  ReusedBuffer<uint64_t> b;
  const auto small = b.Take(100);
  ASSERT_EQ(small.size(), 100u);
  small[99] = 7;
  EXPECT_EQ(b.Take(50).data(), small.data());  // no smaller room: the same one
  const size_t big = kLargeAllocBytes / sizeof(uint64_t) + 1;
  const auto large = b.Take(big);
  ASSERT_EQ(large.size(), big);
  EXPECT_TRUE(AlignedTo(large.data(), kLargeAllocBytes));
  large[big - 1] = 9;
  ReusedBuffer<uint64_t> moved(std::move(b));
  EXPECT_EQ(moved.Take(big).data(), large.data());  // the room moved with it
  EXPECT_EQ(moved.Take(big)[big - 1], 9u);
  ReusedBuffer<uint64_t> assigned;
  (void)assigned.Take(10);
  assigned = std::move(moved);  // frees its own room, takes the other's
  EXPECT_EQ(assigned.Take(big).data(), large.data());
  EXPECT_EQ(b.Take(3).size(), 3u);  // a moved-from buffer is empty and usable
}

}  // namespace
}  // namespace dcr
