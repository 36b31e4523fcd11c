// Per-request block tables over the block pool, with prefix caching of full blocks.
//
// A request's block table lists the blocks that hold its tokens in position order: token p lives in
// block_table[p / block_size] at offset p % block_size. With prefix caching on, once the K/V of a full block
// have been computed (cache_blocks(), after the forward pass) the block is registered under the hash of its
// parent block's hash and its token ids; a later request whose tokens start the same way finds those blocks
// (match_prefix()), shares them (reference counts) and computes only the tokens after them. Blocks are only
// ever shared when full, so a shared block is never written again.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "pagoda/core/ids.h"
#include "pagoda/kv_cache/block_pool.h"

namespace pagoda {

// The cached full blocks that start a token sequence.
struct PrefixMatch {
  std::vector<BlockId> blocks;
  std::vector<BlockHash> hashes;  // hashes[i] is the hash of blocks[i]
  int64_t num_tokens() const { return int64_t(blocks.size()) * block_size; }
  int64_t block_size = 0;
};

// Prefix-cache counters, in tokens: `queries` tokens were looked up when requests were admitted, `hits` of
// them were found cached (and not computed).
struct PrefixCacheStats {
  int64_t queries = 0;
  int64_t hits = 0;
  double hit_rate() const { return queries > 0 ? double(hits) / double(queries) : 0.0; }
};

class KvCacheManager {
 public:
  KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching);

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks for n tokens.
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // The longest run of cached full blocks that starts `tokens` and covers at most `max_tokens` tokens
  // (callers pass len - 1: the last token must be computed to get logits). Empty with prefix caching off.
  // No side effects.
  PrefixMatch match_prefix(std::span<const int32_t> tokens, int64_t max_tokens) const;

  // Makes request `id` hold blocks for its first `num_tokens` tokens. A request that holds no blocks yet
  // first takes `prefix`'s blocks (shared, from match_prefix() in the same scheduling pass). Returns false,
  // changing nothing, when the pool cannot supply the new blocks (evicting unreferenced cached blocks if
  // it must).
  bool allocate(RequestId id, int64_t num_tokens, const PrefixMatch& prefix = {});

  // Registers in the prefix cache the full blocks among the first `num_computed` tokens of request `id`,
  // whose K/V are now in the cache. `tokens` are the request's tokens (at least num_computed of them).
  void cache_blocks(RequestId id, std::span<const int32_t> tokens, int64_t num_computed);

  // Releases every block of request `id` (the tail first, so it is evicted before the shareable prefix).
  // A request that holds none is a no-op.
  void free(RequestId id);

  // Blocks of request `id` (empty when it holds none).
  std::span<const BlockId> block_table(RequestId id) const;
  bool holds_blocks(RequestId id) const { return tables_.count(id) != 0; }

  int32_t num_available_blocks() const { return pool_.num_available(); }
  // Fraction of the blocks held by requests (cached-but-unreferenced blocks count as available).
  double usage() const {
    return pool_.num_blocks() > 0 ? double(pool_.num_in_use()) / double(pool_.num_blocks()) : 0.0;
  }
  // Counts one admission's lookup: `queried` tokens, `hit` of them cached.
  void record_prefix_lookup(int64_t queried, int64_t hit) {
    stats_.queries += queried;
    stats_.hits += hit;
  }
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }
  const BlockPool& pool() const { return pool_; }

  // PAGODA_CHECKs the pool's invariants and the tables': each block's ref_count equals the number of
  // tables holding it, no table holds a block twice or a free/evictable block, and a table's cached blocks
  // carry the hash of their place in that request's chain.
  void check_invariants() const;

 private:
  struct Table {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;  // chain hashes of the first hashes.size() blocks (full and computed)
  };

  int32_t block_size_;
  bool prefix_caching_;
  BlockPool pool_;
  std::unordered_map<RequestId, Table> tables_;
  PrefixCacheStats stats_;
};

}  // namespace pagoda
