// LlamaForCausalLM: the reference decoder layout the other architectures build on.
// Quirks: attention_bias biases q/k/v and o; Llama-3 RoPE scaling
// (parsed with the common keys), no sliding window.
#include "pagoda/model/architecture.h"

namespace pagoda {

std::vector<TensorSpec> hf_decoder_tensor_specs(const ModelConfig& c) {
  const int64_t h = c.hidden_size, hd = c.head_dim, f = c.intermediate_size;
  const int64_t q = int64_t(c.num_heads) * hd, kv = int64_t(c.num_kv_heads) * hd;
  std::vector<TensorSpec> s;
  s.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, WeightRole::kEmbed});
  s.push_back({"model.norm.weight", {h}, WeightRole::kFinalNorm});
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, h}, WeightRole::kLmHead});
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    s.push_back({p + "input_layernorm.weight", {h}, WeightRole::kInputNorm, i});
    s.push_back({p + "post_attention_layernorm.weight", {h}, WeightRole::kPostAttnNorm, i});
    s.push_back({p + "self_attn.q_proj.weight", {q, h}, WeightRole::kQ, i});
    s.push_back({p + "self_attn.k_proj.weight", {kv, h}, WeightRole::kK, i});
    s.push_back({p + "self_attn.v_proj.weight", {kv, h}, WeightRole::kV, i});
    s.push_back({p + "self_attn.o_proj.weight", {h, q}, WeightRole::kO, i});
    if (c.attention_bias) {
      s.push_back({p + "self_attn.q_proj.bias", {q}, WeightRole::kQBias, i});
      s.push_back({p + "self_attn.k_proj.bias", {kv}, WeightRole::kKBias, i});
      s.push_back({p + "self_attn.v_proj.bias", {kv}, WeightRole::kVBias, i});
    }
    if (c.o_proj_bias) s.push_back({p + "self_attn.o_proj.bias", {h}, WeightRole::kOBias, i});
    if (c.qk_norm) {
      s.push_back({p + "self_attn.q_norm.weight", {hd}, WeightRole::kQNorm, i});
      s.push_back({p + "self_attn.k_norm.weight", {hd}, WeightRole::kKNorm, i});
    }
    s.push_back({p + "mlp.gate_proj.weight", {f, h}, WeightRole::kGate, i});
    s.push_back({p + "mlp.up_proj.weight", {f, h}, WeightRole::kUp, i});
    s.push_back({p + "mlp.down_proj.weight", {h, f}, WeightRole::kDown, i});
  }
  return s;
}

namespace {

void llama_quirks(const nlohmann::json& j, const std::string& label, ModelConfig& c) {
  // HF Llama's attention_bias puts a bias on all four projections.
  c.attention_bias = c.o_proj_bias = json_bool(j, "attention_bias", false, label);
  c.qk_norm = false;
}

}  // namespace

const ArchitectureSpec& llama_architecture() {
  static const ArchitectureSpec spec{Architecture::kLlama, "LlamaForCausalLM", "llama", llama_quirks,
                                     hf_decoder_tensor_specs};
  return spec;
}

}  // namespace pagoda
