#include "pagoda/kv_cache/block_allocator.h"

#include "pagoda/core/error.h"

namespace pagoda {

BlockAllocator::BlockAllocator(int32_t num_blocks) : allocated_(size_t(num_blocks), 0) {
  PAGODA_CHECK(num_blocks >= 0, "negative block count ", num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
}

std::optional<int32_t> BlockAllocator::allocate() {
  if (free_list_.empty()) return std::nullopt;
  int32_t b = free_list_.back();
  free_list_.pop_back();
  allocated_[size_t(b)] = 1;
  return b;
}

void BlockAllocator::free(int32_t block) {
  PAGODA_CHECK(block >= 0 && size_t(block) < allocated_.size(), "block ", block, " out of range");
  PAGODA_CHECK(allocated_[size_t(block)], "block ", block, " freed twice");
  allocated_[size_t(block)] = 0;
  free_list_.push_back(block);
}

void SequenceBlocks::reserve(BlockAllocator& alloc, int64_t num_tokens, int32_t block_size) {
  const int64_t need = (num_tokens + block_size - 1) / block_size;
  while (int64_t(blocks_.size()) < need) {
    auto b = alloc.allocate();
    if (!b) throw_runtime_error("KV cache is full: ", alloc.num_blocks(), " blocks of ", block_size, " tokens are all in use");
    blocks_.push_back(*b);
  }
}

void SequenceBlocks::release(BlockAllocator& alloc) {
  for (int32_t b : blocks_) alloc.free(b);
  blocks_.clear();
}

}  // namespace pagoda
