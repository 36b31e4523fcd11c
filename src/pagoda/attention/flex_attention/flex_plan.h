// FLEX_ATTENTION's block mask of one step: for each query tile (block_m consecutive new tokens of one
// sequence) the key blocks (block_n consecutive positions of its context) the mask allows fully or in
// part, in ascending key order; the blocks it does not list are empty and never read. PRIVATE to
// flex_attention/.
//
// Graph-safe plan/run: reserve() sizes every buffer for the step limits, build() fills them on the host
// without allocating, and the kernels only read them. A tile's list depends only on its own sequence
// (its lengths and the mask), never on the rest of the batch.
#pragma once

#include <cstdint>
#include <vector>

#include "pagoda/attention/flex_attention/flex_mask.h"

namespace pagoda {

struct FlexPlanTile {  // plain data: uploaded as is (flex_cuda.h)
  int32_t seq = 0;
  int32_t t_begin = 0, t_end = 0;  // the tile's global query rows [t_begin, t_end)
  int32_t pos_begin = 0;           // the position of row t_begin in its sequence
  int32_t first = 0;               // its entries: entries[first, first + count)
  int32_t count = 0;
};

class FlexBlockPlan {
 public:
  // Capacity for steps of at most max_tokens new tokens over max_seqs sequences of contexts up to
  // max_model_len. PRECOND: block_m, block_n >= 1; block_n <= kFlexMaxRow.
  void reserve(int max_tokens, int max_seqs, int max_model_len, int block_m, int block_n);
  // The step's tiles; throws a runtime pagoda::Error for a step past the reserved limits or with a query
  // longer than its context.
  void build(const FlexMask& mask, const int32_t* query_lens, const int32_t* seq_lens, int num_seqs);

  int block_m() const { return block_m_; }
  int block_n() const { return block_n_; }
  int num_tiles() const { return num_tiles_; }
  const FlexPlanTile& tile(int i) const { return tiles_[size_t(i)]; }
  // Entry e of a tile: key block entry_block(e) (positions [b * block_n, min((b + 1) * block_n, seq_len))),
  // partial or full.
  int32_t entry_block(int32_t e) const { return entries_[size_t(e)] >> 1; }
  bool entry_partial(int32_t e) const { return entries_[size_t(e)] & 1; }

  // The raw arrays, for the upload to the device: tiles()[0 .. num_tiles()), entries()[0 .. num_entries())
  // (block << 1 | partial); the most a step within the reserve can have of each.
  const FlexPlanTile* tiles() const { return tiles_.data(); }
  const int32_t* entries() const { return entries_.data(); }
  int32_t num_entries() const { return num_entries_; }
  size_t capacity_tiles() const { return tiles_.size(); }
  size_t capacity_entries() const { return entries_.size(); }

  // The step's totals, for tests and logs.
  int64_t num_full() const { return num_full_; }
  int64_t num_partial() const { return num_partial_; }
  int64_t num_skipped() const { return num_skipped_; }

 private:
  int block_m_ = 64, block_n_ = 64;
  int max_tokens_ = 0, max_seqs_ = 0, max_model_len_ = 0;
  std::vector<FlexPlanTile> tiles_;  // capacity: every tile a step within the limits can have
  std::vector<int32_t> entries_;     // block << 1 | partial
  int num_tiles_ = 0;
  int32_t num_entries_ = 0;
  int64_t num_full_ = 0, num_partial_ = 0, num_skipped_ = 0;
};

}  // namespace pagoda
