// Private to model/: what differs between architectures. Each architecture file (llama.cc, qwen2.cc,
// qwen3.cc, mistral.cc) defines one ArchitectureSpec: its config.json quirks and its checkpoint names.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagoda/model/model_config.h"
#include "pagoda/model/model_weights.h"

namespace pagoda {

// What a checkpoint tensor is for in the shared decoder.
enum class WeightRole {
  kEmbed, kFinalNorm, kLmHead,
  kInputNorm, kPostAttnNorm,
  kQ, kK, kV, kO, kQBias, kKBias, kVBias, kOBias, kQNorm, kKNorm,
  kGate, kUp, kDown,
};

struct TensorSpec {
  std::string name;            // checkpoint name
  std::vector<int64_t> shape;  // expected shape
  WeightRole role;
  int layer = -1;              // -1 for model-level tensors
};

struct ArchitectureSpec {
  Architecture arch;
  std::string_view hf_name;    // "LlamaForCausalLM"
  std::string_view model_type; // "llama" (config.json model_type, used when "architectures" is absent)
  // Reads the architecture's own keys after the common ones (attention bias, q/k norm, sliding window).
  void (*parse_quirks)(const nlohmann::json& j, const std::string& label, ModelConfig& cfg);
  // Every tensor the model needs, with its expected shape.
  std::vector<TensorSpec> (*tensor_specs)(const ModelConfig& cfg);
};

const ArchitectureSpec& llama_architecture();
const ArchitectureSpec& qwen2_architecture();
const ArchitectureSpec& qwen3_architecture();
const ArchitectureSpec& mistral_architecture();

const ArchitectureSpec& architecture_spec(Architecture a);
const ArchitectureSpec* find_architecture(std::string_view hf_name);  // null when unknown
std::string supported_architectures();  // "LlamaForCausalLM, Qwen2ForCausalLM, ..."

// Where a tensor of `t`'s role goes in `w` (whose layers are sized): a matrix or a float vector.
struct WeightSlot {
  WeightMatrix* matrix = nullptr;
  std::vector<float>* vec = nullptr;
};
WeightSlot weight_slot(ModelWeights& w, const TensorSpec& t);

// Shared by the architecture files -------------------------------------------------------------------

// The Hugging Face Llama-family names: model.embed_tokens, model.layers.{i}.self_attn.{q,k,v,o}_proj,
// mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm, model.norm, lm_head (unless tied);
// plus q/k/v biases when cfg.attention_bias, the o bias when cfg.o_proj_bias, and q_norm/k_norm when cfg.qk_norm.
std::vector<TensorSpec> hf_decoder_tensor_specs(const ModelConfig& cfg);

// Qwen2/Qwen3 sliding-window keys: layer_types, else use_sliding_window + sliding_window + max_window_layers.
void parse_qwen_sliding_window(const nlohmann::json& j, const std::string& label, ModelConfig& cfg);

// Typed optional getters that throw a config error naming the field and `label` on a wrong type.
bool json_bool(const nlohmann::json& j, const char* key, bool def, const std::string& label);
int json_int(const nlohmann::json& j, const char* key, int def, const std::string& label);  // null -> def

}  // namespace pagoda
