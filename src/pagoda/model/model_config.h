// The architecture-independent description of a Hugging Face decoder model, parsed from config.json
// (and generation_config.json). After parsing it is const: nothing below the parser changes it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pagoda/core/dtype.h"

namespace pagoda {

enum class Architecture { kLlama, kQwen2, kQwen3, kMistral };

// "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM".
std::string_view architecture_name(Architecture a);

// Sanity bounds on config.json's sizes. Each is far above every released Llama/Qwen/Mistral model (the
// largest figure is in the comment) and low enough that the products pagoda computes from them (vocab x
// hidden, layers x heads x head_dim x positions) fit in int64 and a position plus a block size fits in
// int32. A file beyond them is corrupt or hostile; refusing it beats allocating until bad_alloc.
inline constexpr int kMaxVocabSize = 1 << 24;            // Gemma 3: 262,208 (the tokenizer's id limit too)
inline constexpr int kMaxHiddenSize = 1 << 16;           // Llama 3.1 405B: 16,384
inline constexpr int kMaxIntermediateSize = 1 << 20;     // Llama 3.1 405B: 53,248
inline constexpr int kMaxNumLayers = 1024;               // Llama 3.1 405B: 126
inline constexpr int kMaxNumHeads = 1024;                // 128
inline constexpr int kMaxHeadDim = 1024;                 // 256
inline constexpr int kMaxPositionEmbeddings = 1 << 24;   // Llama 4 Scout: 10,485,760

struct RopeScaling {
  std::string type = "default";  // "default", "linear" or "llama3" (others are rejected with a clear error)
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
  // [head_dim / 2] divisors of each inverse frequency, applied after the schedule above; empty = none.
  // GGUF files carry Llama-3 scaling this way (llama.cpp's rope_freqs.weight), not as parameters.
  std::vector<float> freq_factors;
};

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string architecture_name;  // as written in config.json, e.g. "Qwen3ForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // num_key_value_heads, else num_heads
  int head_dim = 0;      // head_dim from config.json, else hidden_size / num_heads
  int max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2: always; Llama/Qwen3: attention_bias)
  bool o_proj_bias = false;     // o_proj bias (Llama/Qwen3 attention_bias; never Qwen2)
  bool qk_norm = false;         // Qwen3: per-head RMSNorm of q and k before RoPE
  // Sliding window: the window (0 = none) and, per layer, whether that layer uses it.
  int sliding_window = 0;
  std::vector<bool> layer_uses_sliding_window;  // size num_layers
  std::optional<DType> checkpoint_dtype;        // dtype / torch_dtype of config.json (float32/bfloat16/float16)
  bool has_kv_cache_scheme = false;             // quantization_config.kv_cache_scheme is present
  std::optional<std::string> kv_cache_scheme_strategy;  // its "strategy" ("tensor", "attn_head", ...)
  int bos_token_id = -1;            // generation_config.json, else config.json; -1 = none; else in [0, vocab_size)
  std::vector<int> eos_token_ids;   // likewise; int or list; each in [0, vocab_size)

  bool uses_sliding_window(int layer) const {
    return sliding_window > 0 && size_t(layer) < layer_uses_sliding_window.size() && layer_uses_sliding_window[size_t(layer)];
  }
};

// Parses `path`: a model folder (reads config.json and, if present, generation_config.json) or a config.json
// file. Throws pagoda::Error: runtime kind when the file is missing, config kind for an unknown
// architecture, a missing or mistyped field, a size outside the bounds above or inconsistent with the
// others, a token id outside [0, vocab_size), JSON nested deeper than kMaxJsonDepth, a file larger than
// kMaxConfigFileBytes or an unsupported feature. Integers written as integral floats (4096.0, 1e3) are read
// as integers; 1.5 where an integer is expected is refused.
ModelConfig parse_model_config(const std::string& path);

// The same from JSON text, no file I/O (the fuzz entry point uses it). `label` and `generation_config_label`
// name the sources in errors; generation_config_text may be empty (no such file).
ModelConfig parse_model_config_text(const std::string& config_text, const std::string& label,
                                    const std::string& generation_config_text = "",
                                    const std::string& generation_config_label = "generation_config.json");

// One line for logs: "Qwen3ForCausalLM: 4 layers, hidden 256, heads 8/2 x 64, ffn 512, vocab 1024".
std::string model_config_summary(const ModelConfig& c);

}  // namespace pagoda
