// kv_cache/BlockAllocator: invariants after random operation sequences.
#include "pagoda/kv_cache/block_allocator.h"

#include <random>
#include <set>

#include <gtest/gtest.h>

#include "pagoda/core/error.h"

namespace pagoda {
namespace {

TEST(BlockAllocator, RandomOperationsKeepInvariants) {
  constexpr int32_t kBlocks = 37, kBlockSize = 16;
  BlockAllocator alloc(kBlocks);
  std::vector<SequenceBlocks> seqs(6);
  std::vector<int64_t> lens(6, 0);
  std::mt19937_64 rng(5);
  for (int step = 0; step < 3000; ++step) {
    const size_t s = rng() % seqs.size();
    if (rng() % 4 == 0) {
      seqs[s].release(alloc);
      lens[s] = 0;
    } else {
      const int64_t want = lens[s] + int64_t(rng() % 40);
      try {
        seqs[s].reserve(alloc, want, kBlockSize);
        lens[s] = want;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("KV cache is full"), std::string::npos);
      }
    }
    // Every block is owned by at most one sequence; owned blocks are allocated, the rest free.
    std::set<int32_t> owned;
    size_t count = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      EXPECT_GE(int64_t(seqs[i].blocks().size()) * kBlockSize, lens[i]);
      for (int32_t b : seqs[i].blocks()) {
        owned.insert(b);
        ++count;
        ASSERT_TRUE(alloc.is_allocated(b));
      }
    }
    ASSERT_EQ(owned.size(), count) << "a block is in two sequences";
    ASSERT_EQ(alloc.num_free() + int32_t(count), kBlocks);
  }
}

TEST(BlockAllocator, DoubleFreeIsAnInternalError) {
  BlockAllocator alloc(2);
  auto b = alloc.allocate();
  ASSERT_TRUE(b);
  alloc.free(*b);
  EXPECT_THROW(alloc.free(*b), std::exception);
  EXPECT_THROW(alloc.free(9), std::exception);
  ASSERT_TRUE(alloc.allocate());
  ASSERT_TRUE(alloc.allocate());
  EXPECT_FALSE(alloc.allocate());
}

}  // namespace
}  // namespace pagoda
