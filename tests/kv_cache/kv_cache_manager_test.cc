// kv_cache/: block pool and KvCacheManager. Invariants after thousands of random allocate / append /
// free / fork-by-prefix operations, checked against a simulated KV cache (what each slot holds), plus the
// prefix-cache, LRU-eviction and accounting rules one at a time.
#include "pagoda/kv_cache/kv_cache_manager.h"

#include <cstdio>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "pagoda/core/error.h"

namespace pagoda {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = first + i;
  return t;
}

// A request as the test drives it: its tokens, how many are computed, and the manager it lives in.
struct SimRequest {
  std::vector<int32_t> tokens;
  int64_t computed = 0;
};

// The simulated cache: slot (block, offset) holds the token whose K/V the "model" wrote there.
class SimCache {
 public:
  SimCache(int32_t num_blocks, int32_t block_size) : bs_(block_size), slots_(size_t(num_blocks) * size_t(block_size), -1) {}
  void write(std::span<const BlockId> table, const std::vector<int32_t>& tokens, int64_t from, int64_t to) {
    for (int64_t p = from; p < to; ++p) slots_[slot(table, p)] = tokens[size_t(p)];
  }
  // Every computed position of the request reads back its own token.
  void expect_holds(std::span<const BlockId> table, const SimRequest& r, RequestId id) const {
    for (int64_t p = 0; p < r.computed; ++p)
      ASSERT_EQ(slots_[slot(table, p)], r.tokens[size_t(p)]) << "request " << id << " position " << p;
  }

 private:
  size_t slot(std::span<const BlockId> table, int64_t p) const {
    return size_t(table[size_t(p / bs_)]) * size_t(bs_) + size_t(p % bs_);
  }
  int32_t bs_;
  std::vector<int32_t> slots_;
};

// Test-side checks on top of check_invariants(): ref counts recomputed from the tables, blocks not in use
// appear in no table, tables cover the computed tokens, cached blocks hold exactly the tokens of their place.
void check_against_tables(const KvCacheManager& kv, const std::map<RequestId, SimRequest>& live) {
  kv.check_invariants();
  const BlockPool& pool = kv.pool();
  std::vector<int32_t> refs(size_t(kv.num_blocks()), 0);
  for (const auto& [id, r] : live) {
    std::span<const BlockId> t = kv.block_table(id);
    ASSERT_GE(int64_t(t.size()), kv.blocks_for(r.computed)) << "request " << id;
    for (size_t i = 0; i < t.size(); ++i) {
      ++refs[size_t(t[i])];
      if (pool.is_cached(t[i])) {
        ASSERT_LT(int64_t(i + 1) * kv.block_size(), int64_t(r.tokens.size()) + 1);
        std::vector<int32_t> want(r.tokens.begin() + long(i) * kv.block_size(), r.tokens.begin() + long(i + 1) * kv.block_size());
        ASSERT_EQ(pool.cached_tokens(t[i]), want) << "request " << id << " block " << i;
        ASSERT_EQ(pool.hash(t[i]), hash_block_tokens(pool.parent_hash(t[i]), want));
      }
    }
  }
  for (BlockId b = 0; b < kv.num_blocks(); ++b) {
    ASSERT_EQ(pool.ref_count(b), refs[size_t(b)]) << "block " << b;
    if (pool.state(b) != BlockPool::State::kInUse) {
      ASSERT_EQ(refs[size_t(b)], 0) << "freed block " << b << " is referenced";
    }
  }
  ASSERT_EQ(pool.num_free() + pool.num_evictable() + pool.num_in_use(), kv.num_blocks());
}

void random_workload(bool prefix_caching, int32_t block_size, uint64_t seed) {
  constexpr int32_t kBlocks = 48;
  KvCacheManager kv(kBlocks, block_size, prefix_caching);
  SimCache sim(kBlocks, block_size);
  std::map<RequestId, SimRequest> live;
  std::vector<std::vector<int32_t>> history;  // token lists of requests seen, to fork prefixes from
  std::mt19937_64 rng(seed);
  RequestId next_id = 1;
  int64_t hits = 0, failed_allocs = 0, forks = 0;
  auto rand = [&](int64_t n) { return int64_t(rng() % uint64_t(n)); };
  for (int op = 0; op < 4000; ++op) {
    const int64_t kind = rand(10);
    if (kind < 3 || live.empty()) {  // a new request: random tokens, or a fork of a known prefix
      SimRequest r;
      if (!history.empty() && rand(3) != 0) {
        const auto& src = history[size_t(rand(int64_t(history.size())))];
        r.tokens.assign(src.begin(), src.begin() + rand(int64_t(src.size()) + 1));
        ++forks;
      }
      for (int64_t n = 1 + rand(3 * block_size); n > 0; --n) r.tokens.push_back(int32_t(rand(7)));  // few ids: chance hits
      const PrefixMatch m = kv.match_prefix(r.tokens, int64_t(r.tokens.size()) - 1);
      ASSERT_LE(m.num_tokens(), int64_t(r.tokens.size()) - 1);
      for (size_t i = 0; i < m.blocks.size(); ++i)
        ASSERT_EQ(kv.pool().cached_tokens(m.blocks[i]),
                  std::vector<int32_t>(r.tokens.begin() + long(i) * block_size, r.tokens.begin() + long(i + 1) * block_size));
      const int64_t n = 1 + rand(int64_t(r.tokens.size()) - m.num_tokens());
      const RequestId id = next_id++;
      if (kv.allocate(id, m.num_tokens() + n, m)) {
        kv.record_prefix_lookup(int64_t(r.tokens.size()), m.num_tokens());
        hits += m.num_tokens();
        r.computed = m.num_tokens();
        sim.write(kv.block_table(id), r.tokens, r.computed, r.computed + n);
        r.computed += n;
        kv.cache_blocks(id, r.tokens, r.computed);
        live.emplace(id, std::move(r));
      } else {
        ++failed_allocs;
        ASSERT_FALSE(kv.holds_blocks(id));
      }
    } else if (kind < 8) {  // append: compute more tokens (new ones generated when all are computed)
      auto it = std::next(live.begin(), long(rand(int64_t(live.size()))));
      SimRequest& r = it->second;
      if (r.computed == int64_t(r.tokens.size()))
        for (int64_t n = 1 + rand(block_size + 2); n > 0; --n) r.tokens.push_back(int32_t(rand(7)));
      const int64_t n = 1 + rand(int64_t(r.tokens.size()) - r.computed);
      const size_t before = kv.block_table(it->first).size();
      if (kv.allocate(it->first, r.computed + n)) {
        sim.write(kv.block_table(it->first), r.tokens, r.computed, r.computed + n);
        r.computed += n;
        kv.cache_blocks(it->first, r.tokens, r.computed);
      } else {
        ++failed_allocs;
        ASSERT_EQ(kv.block_table(it->first).size(), before) << "a failed allocation changed the table";
      }
    } else {  // free
      auto it = std::next(live.begin(), long(rand(int64_t(live.size()))));
      kv.free(it->first);
      ASSERT_FALSE(kv.holds_blocks(it->first));
      history.push_back(std::vector<int32_t>(it->second.tokens.begin(), it->second.tokens.begin() + it->second.computed));
      if (history.size() > 32) history.erase(history.begin());
      live.erase(it);
    }
    ASSERT_NO_FATAL_FAILURE(check_against_tables(kv, live)) << "after op " << op;
    for (const auto& [id, r] : live) ASSERT_NO_FATAL_FAILURE(sim.expect_holds(kv.block_table(id), r, id)) << "after op " << op;
  }
  std::printf("[ kv_cache ] block size %d%s: %lld forks, %lld hit tokens, %lld evictions, %lld failed allocations\n",
              block_size, prefix_caching ? "" : " (no prefix caching)", (long long)forks, (long long)hits,
              (long long)kv.pool().num_evictions(), (long long)failed_allocs);
  EXPECT_GT(failed_allocs, 0) << "the workload never filled the cache";
  EXPECT_GT(forks, 100);
  if (prefix_caching) {
    EXPECT_GT(hits, 0);
    EXPECT_GT(kv.pool().num_evictions(), 0);
    EXPECT_EQ(kv.prefix_cache_stats().hits, hits);
  } else {
    EXPECT_EQ(hits, 0);
    EXPECT_EQ(kv.pool().num_evictable(), 0);
  }
  for (const auto& [id, r] : live) kv.free(id);
  live.clear();
  check_against_tables(kv, live);
  EXPECT_EQ(kv.pool().num_in_use(), 0);
  EXPECT_EQ(kv.usage(), 0.0);
}

TEST(KvCacheManager, RandomWorkloadKeepsInvariantsWithPrefixCaching) {
  random_workload(true, 4, 1);
  random_workload(true, 16, 2);
  random_workload(true, 3, 3);
}

TEST(KvCacheManager, RandomWorkloadKeepsInvariantsWithoutPrefixCaching) { random_workload(false, 4, 4); }

TEST(KvCacheManager, SharedPrefixIsFoundAndShared) {
  KvCacheManager kv(16, 4, true);
  const std::vector<int32_t> a = iota_tokens(10, 100);  // blocks [100..103] [104..107], 2 tokens left
  ASSERT_TRUE(kv.allocate(1, 10));
  EXPECT_TRUE(kv.match_prefix(a, 9).blocks.empty()) << "nothing is cached before cache_blocks()";
  kv.cache_blocks(1, a, 10);
  EXPECT_EQ(kv.pool().num_in_use(), 3);

  std::vector<int32_t> b(a.begin(), a.begin() + 8);  // the same two full blocks, then other tokens
  b.insert(b.end(), {7, 7, 7});
  PrefixMatch m = kv.match_prefix(b, int64_t(b.size()) - 1);
  ASSERT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ(m.num_tokens(), 8);
  EXPECT_EQ(m.blocks[0], kv.block_table(1)[0]);
  EXPECT_EQ(m.blocks[1], kv.block_table(1)[1]);
  // At most max_tokens: a prompt of exactly 8 tokens may take only the first block (its last token is computed).
  EXPECT_EQ(kv.match_prefix(std::span(b).first(8), 7).blocks.size(), 1u);
  // A different first block breaks the chain, even with an identical second block.
  std::vector<int32_t> c = b;
  c[0] = 5;
  EXPECT_TRUE(kv.match_prefix(c, 10).blocks.empty());

  ASSERT_TRUE(kv.allocate(2, 11, m));
  EXPECT_EQ(kv.pool().ref_count(m.blocks[0]), 2);
  EXPECT_EQ(kv.block_table(2).size(), 3u);
  EXPECT_EQ(kv.pool().num_in_use(), 4);
  kv.check_invariants();
  // The first request goes: its shared blocks stay with the second, its tail block becomes free (uncached).
  kv.free(1);
  EXPECT_EQ(kv.pool().ref_count(m.blocks[0]), 1);
  EXPECT_EQ(kv.pool().num_in_use(), 3);
  kv.free(2);
  EXPECT_EQ(kv.pool().num_evictable(), 2);  // the two cached blocks, unreferenced but still cached
  EXPECT_EQ(kv.pool().num_free(), 14);
  EXPECT_EQ(kv.match_prefix(b, 10).blocks.size(), 2u);  // still hits after both are gone
  kv.check_invariants();
}

TEST(KvCacheManager, CachedBlocksAreEvictedLeastRecentlyUsedFirstAndOnlyWhenNeeded) {
  KvCacheManager kv(4, 2, true);
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  ASSERT_TRUE(kv.allocate(1, 4));
  kv.cache_blocks(1, a, 4);
  kv.free(1);  // a's two blocks: evictable, tail first in LRU order
  ASSERT_TRUE(kv.allocate(2, 4));
  kv.cache_blocks(2, b, 4);
  kv.free(2);
  EXPECT_EQ(kv.pool().num_evictable(), 4);
  EXPECT_EQ(kv.pool().num_free(), 0);
  EXPECT_EQ(kv.num_available_blocks(), 4);
  // Touching a's prefix makes it the most recently used; the next allocation evicts b's tail block, then
  // b's first block (the tail goes first: a request frees its blocks back to front).
  PrefixMatch ma = kv.match_prefix(a, 4);
  ASSERT_EQ(ma.blocks.size(), 2u);
  ASSERT_TRUE(kv.allocate(3, 4, ma));
  kv.free(3);
  ASSERT_TRUE(kv.allocate(4, 2));
  EXPECT_EQ(kv.match_prefix(b, 4).blocks.size(), 1u) << "b's tail block should have been evicted first";
  EXPECT_EQ(kv.match_prefix(a, 4).blocks.size(), 2u);
  ASSERT_TRUE(kv.allocate(5, 2));
  EXPECT_EQ(kv.match_prefix(b, 4).blocks.size(), 0u);
  EXPECT_EQ(kv.match_prefix(a, 4).blocks.size(), 2u);
  EXPECT_EQ(kv.pool().num_evictions(), 2);
  // With a free block present, allocation never evicts.
  kv.free(5);  // uncached: back to the free stack
  ASSERT_TRUE(kv.allocate(6, 2));
  EXPECT_EQ(kv.pool().num_evictions(), 2);
  // A prefix match whose blocks are evictable counts them as no longer available.
  kv.free(4);
  kv.free(6);
  ma = kv.match_prefix(a, 4);
  EXPECT_FALSE(kv.allocate(7, 2 * 5, ma)) << "5 blocks cannot fit 4";
  EXPECT_FALSE(kv.holds_blocks(7));
  EXPECT_TRUE(kv.allocate(7, 8, ma));  // 2 shared + 2 new: the 2 free ones, no eviction of a's blocks
  EXPECT_EQ(kv.pool().num_evictions(), 2);
  kv.check_invariants();
}

TEST(KvCacheManager, DuplicateBlocksComputedConcurrentlyStayUncached) {
  KvCacheManager kv(8, 2, true);
  const std::vector<int32_t> t = {1, 2, 3, 4};
  ASSERT_TRUE(kv.allocate(1, 4));
  ASSERT_TRUE(kv.allocate(2, 4));  // admitted before 1's blocks were cached: computes the same blocks
  kv.cache_blocks(1, t, 4);
  kv.cache_blocks(2, t, 4);
  kv.check_invariants();
  for (BlockId b : kv.block_table(2)) EXPECT_FALSE(kv.pool().is_cached(b));
  kv.free(2);
  EXPECT_EQ(kv.pool().num_free(), 6);  // its copies go back uncached
  EXPECT_EQ(kv.match_prefix(t, 4).blocks[0], kv.block_table(1)[0]);
}

TEST(KvCacheManager, PrefixCachingOffSharesNothing) {
  KvCacheManager kv(8, 2, false);
  const std::vector<int32_t> t = {1, 2, 3, 4, 5};
  ASSERT_TRUE(kv.allocate(1, 5));
  kv.cache_blocks(1, t, 5);
  EXPECT_TRUE(kv.match_prefix(t, 4).blocks.empty());
  kv.free(1);
  EXPECT_EQ(kv.pool().num_free(), 8);
}

TEST(KvCacheManager, UsageAndHitRate) {
  KvCacheManager kv(10, 4, true);
  ASSERT_TRUE(kv.allocate(1, 9));
  EXPECT_DOUBLE_EQ(kv.usage(), 0.3);
  kv.record_prefix_lookup(100, 25);
  kv.record_prefix_lookup(100, 0);
  EXPECT_DOUBLE_EQ(kv.prefix_cache_stats().hit_rate(), 0.125);
}

TEST(BlockPool, MisuseIsAnInternalError) {
  BlockPool pool(2);
  BlockId b = pool.allocate();
  pool.release(b);
  EXPECT_THROW(pool.release(b), Error);
  EXPECT_THROW(pool.touch(b), Error);  // free, not cached: nothing to hit
  pool.allocate();
  pool.allocate();
  EXPECT_THROW(pool.allocate(), Error);
}

TEST(BlockHash, ChainsParentAndTokens) {
  const std::vector<int32_t> t = {1, 2, 3, 4};
  EXPECT_EQ(hash_block_tokens(kRootBlockHash, t), hash_block_tokens(kRootBlockHash, t));
  EXPECT_NE(hash_block_tokens(kRootBlockHash, t), hash_block_tokens(kRootBlockHash + 1, t));
  EXPECT_NE(hash_block_tokens(kRootBlockHash, t), hash_block_tokens(kRootBlockHash, std::vector<int32_t>{1, 2, 4, 3}));
  std::set<BlockHash> seen;
  for (int32_t i = 0; i < 20000; ++i) seen.insert(hash_block_tokens(kRootBlockHash, std::vector<int32_t>{i, i + 1}));
  EXPECT_EQ(seen.size(), 20000u);
}

}  // namespace
}  // namespace pagoda
