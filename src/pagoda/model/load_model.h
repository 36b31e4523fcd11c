// Model loading: a Hugging Face folder (safetensors, one file or sharded), or random weights of a config's
// shapes (`--load-format dummy`), or the built-in `dummy:tiny`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "pagoda/core/dtype.h"
#include "pagoda/model/model_config.h"
#include "pagoda/model/model_weights.h"

namespace pagoda {

enum class LoadFormat { kAuto, kSafetensors, kDummy };

struct LoadOptions {
  LoadFormat load_format = LoadFormat::kAuto;
  std::optional<DType> dtype;  // weight storage dtype; nullopt = as stored (dummy: config dtype, else float32)
  uint64_t seed = 0;           // dummy weights
};

struct LoadedModel {
  ModelConfig config;
  std::shared_ptr<const ModelWeights> weights;
};

// Name of the built-in model: a small Qwen3-shaped config with random weights (no files needed).
inline constexpr const char* kDummyTinyModel = "dummy:tiny";

// vocab 512 (token ids only), hidden 256, 4 layers, 8 q / 2 kv heads, head_dim 64, ffn 512, rope_theta 1e6,
// bos 1, eos 2, untied lm_head.
ModelConfig dummy_tiny_config();

// `path`: a model folder, or kDummyTinyModel. Throws pagoda::Error (see parse_model_config and
// load_model_weights for which).
LoadedModel load_model(const std::string& path, const LoadOptions& options = {});

// "auto", "safetensors", "dummy" (case-sensitive, as the CLI's --load-format); config error otherwise.
LoadFormat parse_load_format(const std::string& s);

}  // namespace pagoda
