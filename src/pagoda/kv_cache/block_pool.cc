#include "pagoda/kv_cache/block_pool.h"

#include <algorithm>

#include "pagoda/core/error.h"

namespace pagoda {
namespace {

// splitmix64's finaliser: a bijective mix with full avalanche.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

BlockHash hash_block_tokens(BlockHash parent, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ull) + uint64_t(tokens.size());
  for (int32_t t : tokens) h = mix64(h ^ (uint64_t(uint32_t(t)) * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull));
  return h;
}

BlockPool::BlockPool(int32_t num_blocks) {
  PAGODA_CHECK(num_blocks >= 0, "negative block count ", num_blocks);
  blocks_.resize(size_t(num_blocks));
  free_.reserve(size_t(num_blocks));
  for (BlockId b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

void BlockPool::uncache(Block& blk) {
  cached_.erase(blk.hash);
  blk.cached = false;
  blk.hash = blk.parent = 0;
  blk.tokens.clear();
}

BlockId BlockPool::allocate() {
  BlockId b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    PAGODA_CHECK(!lru_.empty(), "block pool: allocate() with no free or evictable block (", num_blocks(), " in use)");
    b = lru_.front();
    lru_.pop_front();
    uncache(blocks_[size_t(b)]);
    ++num_evictions_;
  }
  Block& blk = blocks_[size_t(b)];
  PAGODA_CHECK(blk.ref_count == 0, "block ", b, " handed out with ref_count ", blk.ref_count);
  blk.ref_count = 1;
  blk.state = State::kInUse;
  ++num_in_use_;
  return b;
}

void BlockPool::touch(BlockId b) {
  PAGODA_CHECK(b >= 0 && b < num_blocks(), "block ", b, " out of range");
  Block& blk = blocks_[size_t(b)];
  if (blk.ref_count == 0) {
    PAGODA_CHECK(blk.state == State::kEvictable, "touch of block ", b, ", which is free (not cached)");
    lru_.erase(blk.lru_pos);
    blk.state = State::kInUse;
    ++num_in_use_;
  }
  ++blk.ref_count;
}

void BlockPool::release(BlockId b) {
  PAGODA_CHECK(b >= 0 && b < num_blocks(), "block ", b, " out of range");
  Block& blk = blocks_[size_t(b)];
  PAGODA_CHECK(blk.ref_count > 0, "block ", b, " freed twice");
  if (--blk.ref_count > 0) return;
  --num_in_use_;
  if (blk.cached) {
    blk.state = State::kEvictable;
    blk.lru_pos = lru_.insert(lru_.end(), b);
  } else {
    blk.state = State::kFree;
    free_.push_back(b);
  }
}

bool BlockPool::cache(BlockId b, BlockHash hash, BlockHash parent, std::span<const int32_t> tokens) {
  PAGODA_CHECK(b >= 0 && b < num_blocks(), "block ", b, " out of range");
  Block& blk = blocks_[size_t(b)];
  PAGODA_CHECK(blk.ref_count > 0, "caching block ", b, ", which no request holds");
  if (blk.cached) {
    PAGODA_CHECK(blk.hash == hash, "block ", b, " is cached under another hash");
    return true;
  }
  if (cached_.count(hash)) return false;
  blk.cached = true;
  blk.hash = hash;
  blk.parent = parent;
  blk.tokens.assign(tokens.begin(), tokens.end());
  cached_.emplace(hash, b);
  return true;
}

BlockId BlockPool::lookup(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return -1;
  const Block& blk = blocks_[size_t(it->second)];
  if (blk.parent != parent || !std::equal(tokens.begin(), tokens.end(), blk.tokens.begin(), blk.tokens.end())) return -1;
  return it->second;
}

void BlockPool::check_invariants() const {
  int32_t free = 0, evictable = 0, in_use = 0;
  std::vector<uint8_t> seen(blocks_.size(), 0);
  for (BlockId b : free_) {
    PAGODA_CHECK(b >= 0 && b < num_blocks() && !seen[size_t(b)], "free stack holds block ", b, " twice or out of range");
    seen[size_t(b)] = 1;
    PAGODA_CHECK(blocks_[size_t(b)].state == State::kFree, "block ", b, " on the free stack is not free");
  }
  for (BlockId b : lru_) {
    PAGODA_CHECK(b >= 0 && b < num_blocks() && !seen[size_t(b)], "LRU list holds block ", b, " twice or out of range");
    seen[size_t(b)] = 1;
    PAGODA_CHECK(blocks_[size_t(b)].state == State::kEvictable, "block ", b, " on the LRU list is not evictable");
    PAGODA_CHECK(*blocks_[size_t(b)].lru_pos == b, "block ", b, " has a stale LRU position");
  }
  for (BlockId b = 0; b < num_blocks(); ++b) {
    const Block& blk = blocks_[size_t(b)];
    switch (blk.state) {
      case State::kFree:
        ++free;
        PAGODA_CHECK(blk.ref_count == 0 && !blk.cached, "free block ", b, " has ref_count ", blk.ref_count, " or a hash");
        break;
      case State::kEvictable:
        ++evictable;
        PAGODA_CHECK(blk.ref_count == 0 && blk.cached, "evictable block ", b, " has ref_count ", blk.ref_count, " or no hash");
        break;
      case State::kInUse:
        ++in_use;
        PAGODA_CHECK(blk.ref_count > 0 && !seen[size_t(b)], "in-use block ", b, " has ref_count ", blk.ref_count,
                     " or sits on a free list");
        break;
    }
    if (blk.cached) {
      auto it = cached_.find(blk.hash);
      PAGODA_CHECK(it != cached_.end() && it->second == b, "cached block ", b, " is not in the hash map");
      PAGODA_CHECK(blk.hash == hash_block_tokens(blk.parent, blk.tokens), "cached block ", b,
                   "'s hash does not match its parent hash and tokens");
    }
  }
  for (const auto& [h, b] : cached_)
    PAGODA_CHECK(b >= 0 && b < num_blocks() && blocks_[size_t(b)].cached && blocks_[size_t(b)].hash == h,
                 "hash map names block ", b, ", which is not cached under that hash");
  PAGODA_CHECK(free == num_free() && evictable == num_evictable() && in_use == num_in_use_,
               "block counts disagree: free ", free, "/", num_free(), ", evictable ", evictable, "/", num_evictable(),
               ", in use ", in_use, "/", num_in_use_);
  PAGODA_CHECK(free + evictable + in_use == num_blocks(), "free ", free, " + evictable ", evictable, " + in use ", in_use,
               " != ", num_blocks(), " blocks");
}

}  // namespace pagoda
