#include "pagoda/model/kv_cache_sizing.h"

#include <algorithm>
#include <climits>

#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"

namespace pagoda {

int64_t kv_cache_blocks(const KvCacheSizing& s) {
  PAGODA_CHECK(s.bytes_per_block > 0, "KV cache block of ", s.bytes_per_block, " bytes");
  if (s.num_blocks_override) {
    if (*s.num_blocks_override <= 0)
      throw_config_error("--num-gpu-blocks-override must be positive, got ", *s.num_blocks_override);
    return *s.num_blocks_override;
  }
  double blocks = s.budget_bytes / s.bytes_per_block;
  if (s.max_useful_blocks > 0) blocks = std::min(blocks, double(s.max_useful_blocks));
  blocks = std::min(blocks, double(INT32_MAX));  // block ids are int32
  if (!(blocks >= 1))
    throw_config_error("the KV cache has no room for a single block of ", format_bytes(s.bytes_per_block), " (",
                       format_bytes(std::max(0.0, s.budget_bytes)), " available); ", s.budget_hint);
  return int64_t(blocks);
}

int64_t max_useful_kv_blocks(int max_num_seqs, int max_model_len, int block_size) {
  const int64_t per_seq = (int64_t(max_model_len) + block_size - 1) / block_size + 1;
  return int64_t(max_num_seqs) * per_seq;
}

}  // namespace pagoda
