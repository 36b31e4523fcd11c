// The KV cache's block pool: reference-counted blocks, and the prefix cache that maps the hash of a full
// block (its parent block's hash + its token ids) to the block that holds those tokens' K/V.
//
// Every block is in exactly one of three states, so  num_free + num_evictable + num_in_use == num_blocks:
//   free       ref_count 0, no hash             (a stack: the most recently freed is reused first)
//   evictable  ref_count 0, cached under a hash (an LRU list: the least recently freed is evicted first)
//   in use     ref_count > 0, cached or not     (held by one or more requests' block tables)
// allocate() takes a free block, and evicts the least recently used evictable block (dropping its hash)
// only when no free block is left. A cache hit touch()es a block, taking it off the LRU list if unreferenced.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace pagoda {

using BlockId = int32_t;
using BlockHash = uint64_t;

// The parent hash of a sequence's first block.
inline constexpr BlockHash kRootBlockHash = 0x6a09e667f3bcc908ull;

// Hash of a full block: a chain over the parent block's hash and the block's token ids (64-bit mixing;
// lookups also compare the parent hash and the tokens, so a collision can never return a wrong block).
BlockHash hash_block_tokens(BlockHash parent, std::span<const int32_t> tokens);

class BlockPool {
 public:
  enum class State : uint8_t { kFree, kEvictable, kInUse };

  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return int32_t(blocks_.size()); }
  int32_t num_free() const { return int32_t(free_.size()); }             // unreferenced, not cached
  int32_t num_evictable() const { return int32_t(lru_.size()); }         // unreferenced, cached
  int32_t num_in_use() const { return num_in_use_; }                     // referenced
  int32_t num_available() const { return num_free() + num_evictable(); }  // what allocate() can hand out

  // A block with ref_count 1. PRECOND (checked): num_available() > 0.
  BlockId allocate();
  // ref_count + 1 (a prefix-cache hit); an evictable block leaves the LRU list.
  void touch(BlockId b);
  // ref_count - 1; at 0 a cached block becomes evictable (most recently used end), others free.
  void release(BlockId b);

  // Registers an in-use block as holding the full block (parent, tokens) whose hash is `hash`. Returns false
  // (and leaves the block uncached) when another block is already cached under that hash: two requests
  // computed the same block concurrently, the first one registered stays the one hits return.
  bool cache(BlockId b, BlockHash hash, BlockHash parent, std::span<const int32_t> tokens);
  // The block cached for (parent, tokens) with this hash, or -1.
  BlockId lookup(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens) const;

  int32_t ref_count(BlockId b) const { return blocks_.at(size_t(b)).ref_count; }
  State state(BlockId b) const { return blocks_.at(size_t(b)).state; }
  bool is_cached(BlockId b) const { return blocks_.at(size_t(b)).cached; }
  BlockHash hash(BlockId b) const { return blocks_.at(size_t(b)).hash; }
  BlockHash parent_hash(BlockId b) const { return blocks_.at(size_t(b)).parent; }
  const std::vector<int32_t>& cached_tokens(BlockId b) const { return blocks_.at(size_t(b)).tokens; }
  int64_t num_evictions() const { return num_evictions_; }

  // PAGODA_CHECKs the pool's invariants: states match ref counts and hashes, the free stack and the LRU
  // list hold exactly the free and evictable blocks, the hash map names exactly the cached blocks, each
  // cached block's hash is the hash of its parent and tokens, and the three counts sum to num_blocks.
  void check_invariants() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    State state = State::kFree;
    bool cached = false;
    BlockHash hash = 0, parent = 0;
    std::vector<int32_t> tokens;             // the block's token ids while cached
    std::list<BlockId>::iterator lru_pos{};  // valid while evictable
  };
  void uncache(Block& blk);

  std::vector<Block> blocks_;
  std::vector<BlockId> free_;  // a stack: back() is handed out next
  std::list<BlockId> lru_;     // front = least recently used
  std::unordered_map<BlockHash, BlockId> cached_;
  int32_t num_in_use_ = 0;
  int64_t num_evictions_ = 0;
};

}  // namespace pagoda
