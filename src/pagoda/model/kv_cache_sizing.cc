#include "pagoda/model/kv_cache_sizing.h"

#include <algorithm>
#include <climits>
#include <cstdio>

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

double kv_tokens_vs_bfloat16(const std::vector<AttentionGroup>& groups) {
  double bf16 = 0;  // bytes of one block of every layer, in bfloat16: K and V of head_size elements of 2 bytes
  for (const auto& g : groups)
    bf16 += double(g.layers.size()) * g.shape.num_kv_heads * g.shape.block_size * 2.0 * g.shape.head_size * 2.0;
  return bf16 / double(kv_block_bytes(groups));
}

std::string kv_cache_summary(const std::vector<AttentionGroup>& groups, int64_t num_blocks, int block_size,
                             double bytes, const std::string& kv_cache_dtype) {
  PAGODA_CHECK(!groups.empty(), "a KV cache of no layers");
  size_t layers = 0, quantized = 0;
  for (const auto& g : groups) {
    layers += g.layers.size();
    if (!g.shape.kv_preset.empty() || dtype_is_fp8(g.shape.kv_dtype)) quantized += g.layers.size();
  }
  std::string s = str_cat(num_blocks, " blocks of ", block_size, " tokens (", num_blocks * block_size, " tokens, ",
                          format_bytes(bytes));
  if (quantized == 0) return str_cat(s, ", ", dtype_name(groups.front().shape.kv_dtype), ")");
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2f", kv_tokens_vs_bfloat16(groups));
  return str_cat(s, "; ", kv_cache_dtype, " on ", quantized, " of ", layers, " layers: ", ratio,
                 "x the tokens of a bfloat16 cache)");
}

}  // namespace pagoda
