// What the engine drives: one forward step over a batch of sequences on a paged KV cache, on the CPU or a
// GPU. The runner owns the cache; the engine owns the block tables. Attention runs through one
// AttentionRunner per group of layers (attention/runner.h); a model runner never names a backend.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/attention/backend.h"
#include "pagoda/core/dtype.h"
#include "pagoda/model/kv_scales.h"
#include "pagoda/model/model_config.h"

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
  int block_size = 128;          // CPU_ATTN default; any positive size works on the CPU
  // Every layer's cache element type (kF32, kBF16, kF16, kF8E4M3, kF8E5M2) when the model runner groups the
  // layers itself; a runner given its groups takes each layer's format from its group's shape instead.
  DType dtype = DType::kF32;
  // fp8 caches: stored value = x / scale. Every layer's, unless layer_scales has the layer (the checkpoint's;
  // the kernels take one scale per layer: a per-head checkpoint's largest, as vLLM does for such kernels).
  float k_scale = 1.0f, v_scale = 1.0f;
  std::vector<KvScales> layer_scales;  // [num_layers] or empty

  float layer_k_scale(int layer) const { return size_t(layer) < layer_scales.size() ? layer_scales[size_t(layer)].k : k_scale; }
  float layer_v_scale(int layer) const { return size_t(layer) < layer_scales.size() ? layer_scales[size_t(layer)].v : v_scale; }
};

// Layers that share one attention runner: the backend the selector chose for them and their shape. A model
// whose layers chose differently (sliding-window and full layers, say) has one group per choice.
struct AttentionGroup {
  std::shared_ptr<const AttentionBackend> backend;
  LayerShape shape;
  RunnerOptions options;  // the model runner adds what is its own (the CPU thread pool)
  std::vector<int> layers;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Writes the batch's K/V into the cache; returns fp32 logits [logits_indices.size(), vocab_size] on the host.
  virtual std::vector<float> forward(const ForwardBatch& batch) = 0;
  // The same step, returning only the argmax token of each logits row (ties -> lowest id), computed where
  // the logits are; nullopt when the runner has no such path (then call forward()).
  virtual std::optional<std::vector<int32_t>> forward_greedy(const ForwardBatch& batch) { return std::nullopt; }
  virtual const ModelConfig& config() const = 0;
  virtual const KvCacheOptions& cache_options() const = 0;
};

// The layer shape of `layer` of a model: heads, head size and sliding window from the config.
LayerShape model_layer_shape(const ModelConfig& config, int layer, DType dtype, DType kv_dtype, KvLayout layout,
                             int block_size, bool causal);

// Sets shape.kv_dtype and shape.kv_preset for a layer whose KV cache dtype is `kv_cache_dtype` (an option value
// of --kv-cache-dtype) in a model of `model_dtype`: a turboquant_* preset is kU8 + the preset, anything else
// its element type (spec §10; `auto` = model_dtype).
void set_layer_kv_cache_dtype(LayerShape& shape, const std::string& kv_cache_dtype, DType model_dtype);

// Groups layers by (backend, shape): backends[l] is layer l's backend, kv_cache_dtypes[l] its KV cache dtype
// (TurboQuant boundary layers and --kv-cache-dtype-skip-layers ones: `auto`), resolved against model_dtype;
// `dtype` is the compute dtype of q and the output.
std::vector<AttentionGroup> group_attention_layers(const ModelConfig& config,
                                                   const std::vector<std::shared_ptr<const AttentionBackend>>& backends,
                                                   DType dtype, const std::vector<std::string>& kv_cache_dtypes,
                                                   DType model_dtype, KvLayout layout, int block_size, bool causal,
                                                   const RunnerOptions& options);
// The same with one cache element type for every layer.
std::vector<AttentionGroup> group_attention_layers(const ModelConfig& config,
                                                   const std::vector<std::shared_ptr<const AttentionBackend>>& backends,
                                                   DType dtype, DType kv_dtype, KvLayout layout, int block_size,
                                                   bool causal, const RunnerOptions& options);

// Bytes of one KV-cache block of one layer of `group`: its backend's cache shape (spec §10) for the group's
// shape. The sum over a model's layers (of every group) is the bytes of one block of the whole cache.
int64_t kv_block_bytes(const AttentionGroup& group);
int64_t kv_block_bytes(const std::vector<AttentionGroup>& groups);

}  // namespace pagoda
