// BERT-family sentence encoders (BertModel checkpoints such as sentence-transformers' all-MiniLM-L6-v2) on
// the CPU in float32: config.json, the safetensors weights, the forward pass and the sentence-transformers
// pooling of the folder (modules.json, 1_Pooling/config.json, sentence_bert_config.json).
//
// Forward: word + absolute position + token-type (0) embeddings, LayerNorm; per layer bidirectional
// multi-head attention through the attention runner the selector picks for an encoder_only, non-causal
// layer (on the CPU: CPU_ATTN), output projection, residual and LayerNorm (post-norm), then the
// feed-forward with GELU (erf form), residual and LayerNorm. Sequences of a batch are packed (no padding)
// and never see each other: each is its own sequence of the attention batch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "pagoda/config/attention_config.h"
#include "pagoda/core/kv_layout.h"

namespace pagoda {

struct BertConfig {
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int intermediate_size = 0;
  int max_position_embeddings = 0;
  int type_vocab_size = 0;
  float layer_norm_eps = 1e-12f;
  int head_size() const { return hidden_size / num_heads; }
};

// config.json of a BertModel ("architectures": BertModel / BertForMaskedLM..., or model_type "bert").
// Throws a config error naming `label` for a missing or wrong field, an activation other than gelu, or a
// position_embedding_type other than absolute.
BertConfig parse_bert_config(const nlohmann::json& j, const std::string& label);
// True when config.json describes a BERT-family encoder this file runs.
bool is_bert_config(const nlohmann::json& j);

enum class PoolingMode { kMean, kCls, kMax, kMeanSqrtLen };

// The sentence-transformers modules after the Transformer: pooling, then Normalize when listed. A folder
// without modules.json pools by mean and normalizes (what sentence-transformers does for a plain model
// is mean pooling; normalizing makes the cosine the dot product the embeddings API is used for).
struct SentenceEmbeddingConfig {
  PoolingMode pooling = PoolingMode::kMean;
  bool normalize = true;
  int max_seq_length = 0;  // sentence_bert_config.json's max_seq_length; 0 = max_position_embeddings
};
SentenceEmbeddingConfig read_sentence_embedding_config(const std::filesystem::path& folder);

// How the encoder's attention is chosen: the selector runs on the user's attention settings (--attention-backend,
// --attention-config, --block-size, batch invariance) for encoder-only, non-causal float32 layers on the CPU.
struct BertLoadOptions {
  int num_threads = 0;             // 0: one per hardware thread
  AttentionConfig attention;      // use_non_causal is forced on
  std::optional<int> block_size;  // the user's --block-size
  bool batch_invariant = false;
  std::optional<KvLayout> env_layout;
};

// The KV cache of one forward step as a caller's scheduler laid it out: sequence s of the step owns the blocks
// block_tables[s * block_table_stride ...]. One layer's worth (every layer writes the step's K/V before it
// reads them): num_blocks * kv_block_floats() floats.
struct EncoderStepBlocks {
  float* cache = nullptr;
  int64_t num_blocks = 0;
  const int32_t* block_tables = nullptr;
  int block_table_stride = 0;
};

class BertEncoder {
 public:
  // Loads config.json, the safetensors weights (float32, bfloat16 or float16; "bert." prefixes allowed)
  // and the sentence-transformers files of `folder`. Throws pagoda::Error naming what is missing, and the
  // selector's config errors for attention settings no backend takes.
  static std::unique_ptr<BertEncoder> load(const std::filesystem::path& folder, const BertLoadOptions& options);
  static std::unique_ptr<BertEncoder> load(const std::filesystem::path& folder, int num_threads) {
    BertLoadOptions o;
    o.num_threads = num_threads;
    return load(folder, o);
  }
  ~BertEncoder();

  const BertConfig& config() const;
  const SentenceEmbeddingConfig& sentence_config() const;
  int dimensions() const { return config().hidden_size; }
  // The length inputs are truncated to: max_seq_length (sentence_bert_config.json), capped by the
  // position table; sentence-transformers truncates there too.
  int max_tokens_per_sequence() const;

  // Token ids per sequence (with the tokenizer's [CLS] ... [SEP]); returns one pooled (and, as configured,
  // normalized) vector of dimensions() floats per sequence. PRECOND-checked: every sequence has 1 ..
  // max_position_embeddings ids, each in [0, vocab_size) (runtime error otherwise).
  // With `blocks`, the step's K/V go to the caller's blocks (each sequence's table must cover its length);
  // without, to a cache of this call's own.
  std::vector<std::vector<float>> embed(const std::vector<std::vector<int>>& sequences,
                                        const EncoderStepBlocks* blocks = nullptr) const;
  // The same without pooling: the last layer's hidden states, [sum of lengths, hidden] (tests).
  std::vector<float> hidden_states(const std::vector<std::vector<int>>& sequences,
                                   const EncoderStepBlocks* blocks = nullptr) const;
  // The backend the attention layers run on ("CPU_ATTN" unless the user forced another).
  std::string attention_backend() const;
  // The KV cache's tokens per block and floats per block (K and V of every head).
  int block_size() const;
  int64_t kv_block_floats() const;

 private:
  struct Impl;
  explicit BertEncoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda
