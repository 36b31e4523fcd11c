#include "pagoda/kv_cache/kv_cache_manager.h"

#include <algorithm>

#include "pagoda/core/error.h"

namespace pagoda {

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching), pool_(num_blocks) {
  PAGODA_CHECK(block_size > 0, "block size must be positive, got ", block_size);
}

PrefixMatch KvCacheManager::match_prefix(std::span<const int32_t> tokens, int64_t max_tokens) const {
  PrefixMatch m;
  m.block_size = block_size_;
  if (!prefix_caching_) return m;
  const int64_t n = std::min<int64_t>(max_tokens, int64_t(tokens.size())) / block_size_;
  BlockHash parent = kRootBlockHash;
  for (int64_t i = 0; i < n; ++i) {
    std::span<const int32_t> blk = tokens.subspan(size_t(i * block_size_), size_t(block_size_));
    const BlockHash h = hash_block_tokens(parent, blk);
    const BlockId b = pool_.lookup(h, parent, blk);
    if (b < 0) break;
    m.blocks.push_back(b);
    m.hashes.push_back(h);
    parent = h;
  }
  return m;
}

bool KvCacheManager::allocate(RequestId id, int64_t num_tokens, const PrefixMatch& prefix) {
  auto it = tables_.find(id);
  const bool fresh = it == tables_.end() || it->second.blocks.empty();
  PAGODA_CHECK(prefix.blocks.empty() || fresh, "request ", id, " already holds blocks; a prefix applies only to the first allocation");
  const int64_t have = fresh ? int64_t(prefix.blocks.size()) : int64_t(it->second.blocks.size());
  const int64_t need = std::max<int64_t>(0, blocks_for(num_tokens) - have);
  // Prefix blocks that nobody holds are evictable now; taking them makes them unavailable.
  int64_t available = pool_.num_available();
  for (BlockId b : prefix.blocks)
    if (pool_.ref_count(b) == 0) --available;
  if (need > available) return false;
  if (it == tables_.end()) it = tables_.emplace(id, Table{}).first;
  Table& t = it->second;
  for (BlockId b : prefix.blocks) {
    pool_.touch(b);
    t.blocks.push_back(b);
  }
  t.hashes.insert(t.hashes.end(), prefix.hashes.begin(), prefix.hashes.end());
  for (int64_t i = 0; i < need; ++i) t.blocks.push_back(pool_.allocate());
  return true;
}

void KvCacheManager::cache_blocks(RequestId id, std::span<const int32_t> tokens, int64_t num_computed) {
  if (!prefix_caching_) return;
  auto it = tables_.find(id);
  PAGODA_CHECK(it != tables_.end(), "cache_blocks for request ", id, ", which holds no blocks");
  Table& t = it->second;
  PAGODA_CHECK(num_computed <= int64_t(tokens.size()), "request ", id, ": ", num_computed, " computed tokens but only ",
               tokens.size(), " known");
  const int64_t full = std::min<int64_t>(num_computed / block_size_, int64_t(t.blocks.size()));
  for (int64_t i = int64_t(t.hashes.size()); i < full; ++i) {
    std::span<const int32_t> blk = tokens.subspan(size_t(i * block_size_), size_t(block_size_));
    const BlockHash parent = i == 0 ? kRootBlockHash : t.hashes[size_t(i - 1)];
    const BlockHash h = hash_block_tokens(parent, blk);
    t.hashes.push_back(h);  // the chain continues by content even when the block stays uncached
    pool_.cache(t.blocks[size_t(i)], h, parent, blk);
  }
}

void KvCacheManager::free(RequestId id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  const auto& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) pool_.release(*b);
  tables_.erase(it);
}

std::span<const BlockId> KvCacheManager::block_table(RequestId id) const {
  auto it = tables_.find(id);
  if (it == tables_.end()) return {};
  return it->second.blocks;
}

void KvCacheManager::check_invariants() const {
  pool_.check_invariants();
  std::vector<int32_t> refs(size_t(pool_.num_blocks()), 0);
  for (const auto& [id, t] : tables_) {
    PAGODA_CHECK(t.hashes.size() <= t.blocks.size(), "request ", id, " has more block hashes than blocks");
    for (size_t i = 0; i < t.blocks.size(); ++i) {
      const BlockId b = t.blocks[i];
      PAGODA_CHECK(b >= 0 && b < pool_.num_blocks(), "request ", id, " holds block ", b, ", out of range");
      PAGODA_CHECK(pool_.state(b) == BlockPool::State::kInUse, "request ", id, " holds block ", b, ", which is not in use");
      ++refs[size_t(b)];
      if (pool_.is_cached(b)) {
        PAGODA_CHECK(i < t.hashes.size(), "request ", id, " block ", i, " (", b, ") is cached before it was computed");
        PAGODA_CHECK(pool_.hash(b) == t.hashes[i], "request ", id, " block ", i, " (", b, ") is cached under another hash");
        PAGODA_CHECK(pool_.parent_hash(b) == (i == 0 ? kRootBlockHash : t.hashes[i - 1]), "request ", id, " block ", i,
                     " (", b, ") has another parent");
      }
    }
    std::vector<BlockId> sorted = t.blocks;
    std::sort(sorted.begin(), sorted.end());
    PAGODA_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), "request ", id, " holds a block twice");
  }
  for (BlockId b = 0; b < pool_.num_blocks(); ++b)
    PAGODA_CHECK(refs[size_t(b)] == pool_.ref_count(b), "block ", b, " has ref_count ", pool_.ref_count(b), " but ",
                 refs[size_t(b)], " tables hold it");
}

}  // namespace pagoda
