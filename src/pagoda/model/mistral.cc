// MistralForCausalLM: Llama layout; `sliding_window` (an integer, or null for none) applies to every layer.
#include "pagoda/core/error.h"
#include "pagoda/model/architecture.h"

namespace pagoda {
namespace {

void mistral_quirks(const nlohmann::json& j, const std::string& label, ModelConfig& c) {
  c.attention_bias = false;
  c.qk_norm = false;
  const int window = json_int(j, "sliding_window", 0, label);
  if (window < 0) throw_config_error(label, ": sliding_window must be positive or null, got ", window);
  c.sliding_window = window;
  c.layer_uses_sliding_window.assign(size_t(c.num_layers), window > 0);
}

}  // namespace

const ArchitectureSpec& mistral_architecture() {
  static const ArchitectureSpec spec{Architecture::kMistral, "MistralForCausalLM", "mistral", mistral_quirks,
                                     hf_decoder_tensor_specs};
  return spec;
}

}  // namespace pagoda
