// How many KV-cache blocks a model runner allocates, the same rule on the CPU and the GPU: the user's
// override, else what the memory budget holds, never more than the step limits can use; and how the startup
// log reports the cache's capacity.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/model/model_runner.h"

namespace pagoda {

struct KvCacheSizing {
  double bytes_per_block = 0;  // one block of every layer's cache
  double budget_bytes = 0;     // memory the cache may take
  std::string budget_hint;     // the setting to raise when not one block fits ("raise --kv-cache-space")
  std::optional<int64_t> num_blocks_override;  // --num-gpu-blocks-override
  int64_t max_useful_blocks = 0;  // > 0: at most this many (the longest contexts of max_num_seqs sequences)
};

// Throws a config pagoda::Error when no block fits (or the override is not positive).
int64_t kv_cache_blocks(const KvCacheSizing& s);

// Blocks that max_num_seqs sequences of max_model_len tokens can hold at once (+1 each for a partial block).
int64_t max_useful_kv_blocks(int max_num_seqs, int max_model_len, int block_size);

// The bytes per token of a cache of every layer of `groups` in bfloat16 over the bytes per token of theirs
// (kv_block_bytes, so layers with an unquantized cache count at their own size): how many times the tokens of
// a bfloat16 cache the same bytes hold.
double kv_tokens_vs_bfloat16(const std::vector<AttentionGroup>& groups);

// The startup log's account of a cache of num_blocks blocks taking `bytes`: "4096 blocks of 128 tokens (524288
// tokens, 1.50 GiB, bfloat16)"; with layers in a quantized format (fp8*, turboquant_*: kv_cache_dtype, the
// model's) "(524288 tokens, 1.50 GiB; turboquant_k3v4_nc on 26 of 30 layers: 1.93x the tokens of a bfloat16
// cache)".
std::string kv_cache_summary(const std::vector<AttentionGroup>& groups, int64_t num_blocks, int block_size,
                             double bytes, const std::string& kv_cache_dtype);

}  // namespace pagoda
