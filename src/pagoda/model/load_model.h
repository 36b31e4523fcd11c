// Model loading: a Hugging Face folder (safetensors, one file or sharded), a GGUF file, or random weights of
// a config's shapes (`--load-format dummy`), or the built-in `dummy:tiny`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/core/dtype.h"
#include "pagoda/model/kv_scales.h"
#include "pagoda/model/model_config.h"
#include "pagoda/model/model_weights.h"
#include "pagoda/tokenizer/gguf_vocab.h"

namespace pagoda {

enum class LoadFormat { kAuto, kSafetensors, kGguf, kDummy };

struct LoadOptions {
  LoadFormat load_format = LoadFormat::kAuto;
  std::optional<DType> dtype;  // weight storage dtype; nullopt = as stored (dummy: config dtype, else float32)
  uint64_t seed = 0;           // dummy weights
  // Random weights are made by the runner where they live (GPU runners fill device memory directly, which
  // a multi-gigabyte dummy model needs); LoadedModel::weights stays null.
  bool defer_random_weights = false;
  // The KV cache stores fp8, so the checkpoint's KV-cache scales will be used: log what was loaded and warn
  // where a layer falls back to 1.0. The scales are read and checked either way.
  bool kv_cache_fp8 = false;
};

struct LoadedModel {
  ModelConfig config;
  std::shared_ptr<const ModelWeights> weights;
  // Random weights of a quantized built-in (dummy:llama3-8b-q4_k): the block format of every linear layer's
  // matrix, the lm_head included (the embedding and norms stay plain). Deferred weights are made so by the
  // runner; host ones are quantized by load_model.
  QuantType random_weight_quant = QuantType::kNone;
  // FP8 KV-cache scales, [num_layers] when the checkpoint declares or holds them (see load_kv_scales), else
  // empty: always empty for random weights.
  std::vector<KvScales> kv_scales;
  // A GGUF file's tokenizer.ggml.* metadata (tokenizer_from_gguf_vocab builds the tokenizer); nullopt for
  // other formats and for GGUF files without a vocabulary.
  std::optional<GgufVocab> gguf_vocab;
};

// Name of the built-in model: a small Qwen3-shaped config with random weights (no files needed).
inline constexpr const char* kDummyTinyModel = "dummy:tiny";

// vocab 512 (token ids only), hidden 256, 4 layers, 8 q / 2 kv heads, head_dim 64, ffn 512, rope_theta 1e6,
// bos 1, eos 2, untied lm_head.
ModelConfig dummy_tiny_config();

// Built-in models with random weights, for benchmarks: "dummy:llama3-8b" has Llama-3-8B's shapes (32 layers,
// hidden 4096, ffn 14336, 32 q / 8 kv heads of 128, vocab 128256, rope theta 500000, bf16).
inline constexpr const char* kDummyLlama3_8B = "dummy:llama3-8b";
ModelConfig dummy_llama3_8b_config();
// The same shapes with every linear layer's matrix (lm_head included) stored quantized by pagoda's own
// quantizer, for benchmarks of the quantized kernels against bf16.
inline constexpr const char* kDummyLlama3_8B_Q4K = "dummy:llama3-8b-q4_k";
inline constexpr const char* kDummyLlama3_8B_Q8_0 = "dummy:llama3-8b-q8_0";
// The config of a built-in model name (dummy:tiny, dummy:llama3-8b[-q4_k|-q8_0]), or nullopt.
std::optional<ModelConfig> builtin_model_config(const std::string& name);
// The block format of a built-in's linear layers: kNone but for the quantized built-ins.
QuantType builtin_model_quant(const std::string& name);

// `path`: a model folder, a GGUF file (auto: a file that starts with the GGUF magic or ends in .gguf), or
// kDummyTinyModel. Throws pagoda::Error (see parse_model_config, load_model_weights, load_kv_scales,
// gguf_model_config and load_gguf_weights for which).
LoadedModel load_model(const std::string& path, const LoadOptions& options = {});

// "auto", "safetensors", "gguf", "dummy" (case-sensitive, as the CLI's --load-format); config error otherwise.
LoadFormat parse_load_format(const std::string& s);

}  // namespace pagoda
