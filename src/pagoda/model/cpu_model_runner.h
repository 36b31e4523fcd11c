// The CPU forward pass shared by every architecture: embedding -> layers (RMSNorm, q/k/v projections
// (+bias), Qwen3 q/k norm, RoPE, KV write + CPU_ATTN over the paged cache, o projection, residual, RMSNorm,
// SwiGLU MLP, residual) -> final norm -> logits. Float32 compute; weights f32/bf16/f16 as loaded.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "pagoda/core/dtype.h"
#include "pagoda/model/load_model.h"
#include "pagoda/model/model_runner.h"
#include "pagoda/ops/rope.h"
#include "pagoda/ops/thread_pool.h"

namespace pagoda {

// One step over a batch of sequences, each contributing consecutive new tokens (a prefill chunk or a single
// decode token). Sequence s owns tokens [query_start_loc[s], query_start_loc[s+1]) of token_ids and has
// seq_lens[s] tokens in the KV cache once they are written, so its i-th new token has position
// seq_lens[s] - q_len + i and goes to slot block_tables[s][pos / block_size] * block_size + pos % block_size.
struct ForwardBatch {
  std::vector<int32_t> token_ids;        // [num_tokens]
  std::vector<int32_t> query_start_loc;  // [num_seqs + 1], query_start_loc[0] == 0, last == num_tokens
  std::vector<int32_t> seq_lens;         // [num_seqs]
  std::vector<int32_t> block_tables;     // [num_seqs, max_blocks_per_seq], block ids of the runner's cache
  int max_blocks_per_seq = 0;
  std::vector<int32_t> logits_indices;   // indices into token_ids whose logits forward() returns, in order

  int num_seqs() const { return int(seq_lens.size()); }
  int num_tokens() const { return int(token_ids.size()); }
};

struct KvCacheOptions {
  int64_t num_blocks = 0;
  int block_size = 128;          // CPU_ATTN default; any positive size works
  DType dtype = DType::kF32;     // kF32, kBF16, kF16, kF8E4M3, kF8E5M2
  float k_scale = 1.0f, v_scale = 1.0f;  // fp8 caches
};

// Owns the KV cache, a thread pool and per-step workspace; one forward() at a time (not thread-safe).
class CpuModelRunner final : public ModelRunner {
 public:
  // Allocates the KV cache (num_layers x num_blocks x kv_heads x block_size x 2*head_dim). num_threads <= 0:
  // one per hardware thread.
  CpuModelRunner(const LoadedModel& model, const KvCacheOptions& cache, int num_threads = 0);

  // Runs the batch, writing its K/V into the cache; returns logits [logits_indices.size(), vocab_size].
  // Throws a runtime pagoda::Error for an inconsistent batch (lengths, block ids, token ids).
  std::vector<float> forward(const ForwardBatch& batch) override;

  const ModelConfig& config() const override { return config_; }
  const KvCacheOptions& cache_options() const override { return cache_; }

 private:
  void check_batch(const ForwardBatch& b) const;
  void layer(int l, const ForwardBatch& b, int64_t T);

  ModelConfig config_;
  std::shared_ptr<const ModelWeights> weights_;
  KvCacheOptions cache_;
  ThreadPool pool_;
  std::vector<float> inv_freq_;                 // [head_dim / 2]
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> kv_cache_;  // per layer, calloc'ed
  // Per-step workspace, reused across calls.
  std::vector<int32_t> positions_;
  std::vector<int64_t> slots_;
  std::vector<float> h_, xn_, qkv_, attn_, tmp_, gu_, act_;
};

}  // namespace pagoda
