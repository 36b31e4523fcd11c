// The CPU forward pass shared by every architecture: embedding -> layers (RMSNorm, q/k/v projections
// (+bias), Qwen3 q/k norm, RoPE, KV write + CPU_ATTN over the paged cache, o projection, residual, RMSNorm,
// SwiGLU MLP, residual) -> final norm -> logits. Float32 compute; weights f32/bf16/f16 as loaded. Attention
// runs through the runners of the layer groups (model_runner.h), which write the cache themselves.
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

// Owns the KV cache, a thread pool and per-step workspace; one forward() at a time (not thread-safe).
class CpuModelRunner final : public ModelRunner {
 public:
  // Allocates the KV cache (per layer: num_blocks blocks of its group's format, kv_block_bytes) and one
  // attention runner per group; every layer must be in exactly one group, every group of cache.block_size.
  // num_threads <= 0: one per hardware thread.
  CpuModelRunner(const LoadedModel& model, const KvCacheOptions& cache, std::vector<AttentionGroup> groups,
                 int num_threads = 0);
  // Every layer on the CPU's own attention backend (attention/registry.h), causal, with a cache of cache.dtype.
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
  std::vector<AttentionGroup> groups_;
  std::vector<std::unique_ptr<AttentionRunner>> runners_;  // per group
  std::vector<int> layer_group_;                           // [num_layers] -> index into runners_
  std::vector<float> inv_freq_;                 // [head_dim / 2]
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> kv_cache_;  // per layer, calloc'ed
  // Per-step workspace, reused across calls.
  std::vector<int32_t> positions_;
  std::vector<int64_t> slots_;
  std::vector<float> h_, xn_, qkv_, attn_, tmp_, gu_, act_;
};

}  // namespace pagoda
