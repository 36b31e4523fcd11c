#include "pagoda/attention/flex_attention/flex_plan.h"

#include <algorithm>

#include "pagoda/core/error.h"

namespace pagoda {

void FlexBlockPlan::reserve(int max_tokens, int max_seqs, int max_model_len, int block_m, int block_n) {
  PAGODA_CHECK(block_m >= 1 && block_n >= 1 && block_n <= kFlexMaxRow, "flex plan: tile sizes ", block_m, "/", block_n);
  PAGODA_CHECK(max_tokens >= 0 && max_seqs >= 0 && max_model_len >= 0, "flex plan: negative limits");
  block_m_ = block_m;
  block_n_ = block_n;
  max_tokens_ = max_tokens;
  max_seqs_ = max_seqs;
  max_model_len_ = max_model_len;
  // Every sequence adds at most one tile beyond its share of ceil(tokens / block_m); each tile lists at most
  // every key block of the longest context.
  const int64_t tiles = int64_t(max_tokens) / block_m + max_seqs;
  const int64_t blocks = (int64_t(max_model_len) + block_n - 1) / block_n;
  tiles_.assign(size_t(tiles), {});
  entries_.assign(size_t(tiles * blocks), 0);
  num_tiles_ = 0;
  num_entries_ = 0;
}

void FlexBlockPlan::build(const FlexMask& mask, const int32_t* query_lens, const int32_t* seq_lens, int num_seqs) {
  if (num_seqs > max_seqs_) throw_runtime_error("flex plan: ", num_seqs, " sequences, reserved ", max_seqs_);
  int64_t tokens = 0;
  for (int s = 0; s < num_seqs; ++s) tokens += query_lens[s];
  if (tokens > max_tokens_) throw_runtime_error("flex plan: ", tokens, " new tokens, reserved ", max_tokens_);
  num_tiles_ = 0;
  num_entries_ = 0;
  num_full_ = num_partial_ = num_skipped_ = 0;
  int32_t t0 = 0, next = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const int32_t q_len = query_lens[s], ctx = seq_lens[s];
    if (q_len < 0 || q_len > ctx)
      throw_runtime_error("flex plan: sequence ", s, " has ", q_len, " query tokens and a context of ", ctx);
    if (ctx > max_model_len_) throw_runtime_error("flex plan: sequence ", s, " context ", ctx, " > ", max_model_len_);
    const int32_t nblocks = (ctx + block_n_ - 1) / block_n_;
    for (int32_t i = 0; i < q_len; i += block_m_) {
      if (size_t(num_tiles_) >= tiles_.size()) throw_runtime_error("flex plan: more tiles than reserved");
      if (size_t(next) + size_t(nblocks) > entries_.size()) throw_runtime_error("flex plan: more entries than reserved");
      FlexPlanTile& t = tiles_[size_t(num_tiles_++)];
      const int32_t rows = std::min(block_m_, q_len - i);
      t = {s, t0 + i, t0 + i + rows, ctx - q_len + i, next, 0};
      for (int32_t b = 0; b < nblocks; ++b) {
        const int32_t k0 = b * block_n_, k1 = std::min(k0 + block_n_, ctx);
        const FlexTile c = mask.classify(s, t.pos_begin, t.pos_begin + rows, k0, k1);
        if (c == FlexTile::kEmpty) {
          ++num_skipped_;
          continue;
        }
        const bool partial = c == FlexTile::kPartial;
        (partial ? num_partial_ : num_full_) += 1;
        entries_[size_t(next++)] = b << 1 | int32_t(partial);
      }
      t.count = next - t.first;
    }
    t0 += q_len;
  }
  num_entries_ = next;
}

}  // namespace pagoda
