// How many KV-cache blocks a model runner allocates, the same rule on the CPU and the GPU: the user's
// override, else what the memory budget holds, never more than the step limits can use.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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

}  // namespace pagoda
