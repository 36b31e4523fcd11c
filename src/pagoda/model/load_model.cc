#include "pagoda/model/load_model.h"

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/model/gguf_model.h"
#include "pagoda/model/safetensors.h"
#include "pagoda/model/quantize_weights.h"

namespace pagoda {

ModelConfig dummy_tiny_config() {
  ModelConfig c;
  c.arch = Architecture::kQwen3;
  c.architecture_name = std::string(architecture_name(c.arch));
  c.vocab_size = 512;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_layers = 4;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6;
  c.qk_norm = true;
  c.layer_uses_sliding_window.assign(size_t(c.num_layers), false);
  c.checkpoint_dtype = DType::kF32;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

LoadFormat parse_load_format(const std::string& s) {
  if (s == "auto") return LoadFormat::kAuto;
  if (s == "safetensors") return LoadFormat::kSafetensors;
  if (s == "gguf") return LoadFormat::kGguf;
  if (s == "dummy") return LoadFormat::kDummy;
  throw_config_error("unknown load format '", s, "' (valid: auto, safetensors, gguf, dummy)");
}

ModelConfig dummy_llama3_8b_config() {
  ModelConfig c;
  c.arch = Architecture::kLlama;
  c.architecture_name = "LlamaForCausalLM";
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.tie_word_embeddings = false;
  c.layer_uses_sliding_window.assign(size_t(c.num_layers), false);
  c.checkpoint_dtype = DType::kBF16;
  c.bos_token_id = 128000;
  c.eos_token_ids = {128001, 128009};
  return c;
}

std::optional<ModelConfig> builtin_model_config(const std::string& name) {
  if (name == kDummyTinyModel) return dummy_tiny_config();
  if (name == kDummyLlama3_8B || name == kDummyLlama3_8B_Q4K || name == kDummyLlama3_8B_Q8_0)
    return dummy_llama3_8b_config();
  return std::nullopt;
}

QuantType builtin_model_quant(const std::string& name) {
  if (name == kDummyLlama3_8B_Q4K) return QuantType::kQ4_K;
  if (name == kDummyLlama3_8B_Q8_0) return QuantType::kQ8_0;
  return QuantType::kNone;
}

LoadedModel load_model(const std::string& path, const LoadOptions& opt) {
  LoadedModel m;
  auto builtin = builtin_model_config(path);
  std::shared_ptr<const GgufFile> gguf;
  if (builtin) {
    if (opt.load_format == LoadFormat::kSafetensors || opt.load_format == LoadFormat::kGguf)
      throw_config_error("'", path, "' is a built-in model with random weights; it has no files to load");
    m.config = *builtin;
  } else if (opt.load_format == LoadFormat::kGguf || is_gguf_path(path)) {
    if (opt.load_format == LoadFormat::kSafetensors)
      throw_config_error("'", path, "' is a GGUF file, not safetensors; use --load-format gguf or auto");
    gguf = GgufFile::open(path);
    m.config = gguf_model_config(*gguf);
    m.gguf_vocab = read_gguf_vocab(*gguf);
  } else {
    m.config = parse_model_config(path);
  }
  PAGODA_LOG_INFO("model ", path, ": ", model_config_summary(m.config));
  if (builtin || opt.load_format == LoadFormat::kDummy) {
    const DType dt = opt.dtype.value_or(m.config.checkpoint_dtype.value_or(DType::kF32));
    if (builtin) m.random_weight_quant = builtin_model_quant(path);
    if (opt.defer_random_weights) {
      PAGODA_LOG_INFO("random (dummy) weights, seed ", opt.seed, ", ", dtype_name(dt), ", made on the device");
      return m;
    }
    ModelWeights w = make_random_weights(m.config, opt.seed, dt);
    if (m.random_weight_quant != QuantType::kNone) quantize_matrices(w, m.random_weight_quant);
    m.weights = std::make_shared<const ModelWeights>(std::move(w));
    PAGODA_LOG_INFO("random (dummy) weights, seed ", opt.seed, ", ", dtype_name(dt),
                    m.random_weight_quant != QuantType::kNone
                        ? str_cat(", linear layers ", quant_traits(m.random_weight_quant).name) : std::string());
    return m;
  }
  if (gguf) {
    m.weights = std::make_shared<const ModelWeights>(load_gguf_weights(m.config, gguf, opt.dtype));
    return m;
  }
  auto ck = SafetensorsCheckpoint::open(path);
  m.weights = std::make_shared<const ModelWeights>(load_model_weights(m.config, ck, opt.dtype));
  m.kv_scales = load_kv_scales(m.config, *ck, opt.kv_cache_fp8);
  return m;
}

}  // namespace pagoda
