// Qwen3ForCausalLM: Llama layout + per-head RMSNorm of q and k (q_norm, k_norm over head_dim) before RoPE,
// optional attention_bias, Qwen-style sliding window keys.
#include "pagoda/model/architecture.h"

namespace pagoda {
namespace {

void qwen3_quirks(const nlohmann::json& j, const std::string& label, ModelConfig& c) {
  c.attention_bias = c.o_proj_bias = json_bool(j, "attention_bias", false, label);  // as HF Qwen3Attention
  c.qk_norm = true;
  parse_qwen_sliding_window(j, label, c);
}

}  // namespace

const ArchitectureSpec& qwen3_architecture() {
  static const ArchitectureSpec spec{Architecture::kQwen3, "Qwen3ForCausalLM", "qwen3", qwen3_quirks,
                                     hf_decoder_tensor_specs};
  return spec;
}

}  // namespace pagoda
