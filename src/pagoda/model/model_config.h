// The architecture-independent description of a Hugging Face decoder model, parsed from config.json.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pagoda/core/dtype.h"

namespace pagoda {

enum class Architecture { kLlama, kQwen2, kQwen3, kMistral };

struct RopeScaling {
  std::string type = "default";  // "default" or "llama3" (others are rejected with a clear error)
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string architecture_name;  // as written in config.json, e.g. "Qwen3ForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // head_dim from config.json, else hidden_size / num_heads
  int max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2: always true)
  bool qk_norm = false;         // Qwen3: per-head RMSNorm of q and k before RoPE
  // Sliding window: per layer flag and the window (0 = none).
  int sliding_window = 0;
  std::vector<bool> layer_uses_sliding_window;  // size num_layers
  std::optional<DType> checkpoint_dtype;        // torch_dtype / dtype of config.json (float32/bfloat16/float16)
  std::optional<std::string> kv_cache_scheme_strategy;  // quantization_config.kv_cache_scheme.strategy if present
  bool has_kv_cache_scheme = false;
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
};

}  // namespace pagoda
