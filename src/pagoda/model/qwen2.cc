// Qwen2ForCausalLM: Llama layout + q/k/v biases (never o), sliding window per layer_types /
// use_sliding_window + max_window_layers.
#include "pagoda/core/error.h"
#include "pagoda/core/json_checks.h"
#include "pagoda/model/architecture.h"

namespace pagoda {

void parse_qwen_sliding_window(const nlohmann::json& j, const std::string& label, ModelConfig& c) {
  const bool use = json_bool(j, "use_sliding_window", false, label);
  const int window = json_int(j, "sliding_window", 0, label);
  const int max_window_layers = json_int(j, "max_window_layers", c.num_layers, label);
  auto lt = j.find("layer_types");
  if (lt != j.end() && !lt->is_null()) {
    if (!lt->is_array() || lt->size() != size_t(c.num_layers))
      throw_config_error(label, ": 'layer_types' must list one type per layer (", c.num_layers, "), got ", json_preview(*lt));
    for (int i = 0; i < c.num_layers; ++i) {
      const auto& t = (*lt)[size_t(i)];
      if (t.is_string() && t.get<std::string>() == "sliding_attention") c.layer_uses_sliding_window[size_t(i)] = true;
      else if (!t.is_string() || t.get<std::string>() != "full_attention")
        throw_config_error(label, ": layer_types[", i, "] is ", json_preview(t), " (expected full_attention or sliding_attention)");
    }
  } else if (use && window > 0) {
    for (int i = 0; i < c.num_layers; ++i) c.layer_uses_sliding_window[size_t(i)] = i >= max_window_layers;
  }
  bool any = false;
  for (bool b : c.layer_uses_sliding_window) any = any || b;
  if (any && window <= 0) throw_config_error(label, ": layers use sliding attention but 'sliding_window' is not a positive integer");
  c.sliding_window = any ? window : 0;
}

namespace {

void qwen2_quirks(const nlohmann::json& j, const std::string& label, ModelConfig& c) {
  c.attention_bias = true;  // Qwen2 always has q/k/v biases
  c.qk_norm = false;
  parse_qwen_sliding_window(j, label, c);
}

}  // namespace

const ArchitectureSpec& qwen2_architecture() {
  static const ArchitectureSpec spec{Architecture::kQwen2, "Qwen2ForCausalLM", "qwen2", qwen2_quirks,
                                     hf_decoder_tensor_specs};
  return spec;
}

}  // namespace pagoda
