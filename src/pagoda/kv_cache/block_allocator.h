// A minimal KV-cache block allocator and per-sequence block list, for the model tests' driver. The engine
// uses KvCacheManager (kv_cache_manager.h: ref-counted block pool, block tables, prefix caching).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace pagoda {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);
  // A free block (the most recently freed first; initially in id order), or nullopt when none is free.
  std::optional<int32_t> allocate();
  // PAGODA_CHECK: block is in range and currently allocated.
  void free(int32_t block);
  int32_t num_free() const { return int32_t(free_list_.size()); }
  int32_t num_blocks() const { return int32_t(allocated_.size()); }
  bool is_allocated(int32_t block) const { return allocated_.at(size_t(block)) != 0; }

 private:
  std::vector<int32_t> free_list_;  // a stack: back() is handed out next
  std::vector<uint8_t> allocated_;
};

// The blocks of one sequence, in position order.
class SequenceBlocks {
 public:
  // Grows the list to cover num_tokens positions. Throws a runtime pagoda::Error when the allocator runs
  // out (blocks taken so far stay in the list).
  void reserve(BlockAllocator& alloc, int64_t num_tokens, int32_t block_size);
  // Returns every block to the allocator.
  void release(BlockAllocator& alloc);
  const std::vector<int32_t>& blocks() const { return blocks_; }

 private:
  std::vector<int32_t> blocks_;
};

}  // namespace pagoda
