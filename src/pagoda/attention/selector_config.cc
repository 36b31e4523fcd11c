#include "pagoda/attention/selector_config.h"

#include "pagoda/core/strings.h"

namespace pagoda {

std::string_view attn_type_str(AttnType t) {
  switch (t) {
    case AttnType::kDecoder: return "decoder";
    case AttnType::kEncoder: return "encoder";
    case AttnType::kEncoderOnly: return "encoder_only";
    case AttnType::kEncoderDecoder: return "encoder_decoder";
  }
  return "?";
}

std::optional<AttnType> parse_attn_type(std::string_view s) {
  for (AttnType t : {AttnType::kDecoder, AttnType::kEncoder, AttnType::kEncoderOnly, AttnType::kEncoderDecoder})
    if (attn_type_str(t) == s) return t;
  return std::nullopt;
}

namespace {
const char* py_bool(bool b) { return b ? "True" : "False"; }
}  // namespace

std::string SelectorConfig::repr() const {
  return str_cat("AttentionSelectorConfig(head_size=", head_size, ", dtype=", dtype_name(dtype),
                 ", kv_cache_dtype=", kv_cache_dtype, ", block_size=",
                 block_size ? std::to_string(*block_size) : std::string("None"), ", has_sink=", py_bool(has_sink),
                 ", use_per_head_quant_scales=", py_bool(use_per_head_quant_scales), ", attn_type=",
                 attn_type_str(attn_type), ", has_sliding_window=", py_bool(has_sliding_window),
                 ", use_non_causal=", py_bool(use_non_causal), ", use_batch_invariant=", py_bool(use_batch_invariant),
                 ")");
}

std::string_view SelectorConfig::layer_kind() const {
  switch (attn_type) {
    case AttnType::kEncoderOnly: return "encoder_only_attention";
    case AttnType::kEncoderDecoder: return "cross_attention";
    case AttnType::kDecoder:
    case AttnType::kEncoder: break;
  }
  return has_sliding_window ? "sliding_window" : "full_attention";
}

bool is_fp8_kv_dtype(std::string_view kv) { return kv == "fp8" || kv == "fp8_e4m3" || kv == "fp8_e5m2"; }
bool is_turboquant_kv_dtype(std::string_view kv) { return starts_with(kv, "turboquant_"); }

}  // namespace pagoda
