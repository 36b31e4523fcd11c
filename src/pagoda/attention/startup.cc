#include "pagoda/attention/startup.h"

#include <algorithm>

#include "pagoda/attention/selector_config.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"

namespace pagoda {

ResolvedAttentionSettings resolve_attention_settings(const ValidatedArgs& args, DeviceKind device) {
  ResolvedAttentionSettings r;
  r.attention = args.attention_config;
  r.kv_cache_dtype = args.kv_cache_dtype;
  r.user_block_size = args.block_size;
  r.batch_invariant = args.batch_invariant;
  r.env_layout = args.env.kv_cache_layout;
  if (r.attention.use_trtllm_attention)
    PAGODA_LOG_WARNING("attention_config.use_trtllm_attention has no effect in pagoda: TRT-LLM attention kernels are not built.");
  if (is_turboquant_kv_dtype(r.kv_cache_dtype) &&
      (!r.attention.flash_attn_version || *r.attention.flash_attn_version >= 3)) {
    r.attention.flash_attn_version = 2;
    PAGODA_LOG_WARNING("TurboQuant is not yet compatible with FlashAttention >= 3. Overriding flash_attn_version to 2. "
                       "To silence this warning, pass --attention-config.flash_attn_version=2");
  }
  if (device == DeviceKind::kCpu) {
    int final_block = r.user_block_size.value_or(128);
    if (final_block % 32 != 0)
      PAGODA_LOG_WARNING("CPU backend prefers block_size is multiples of 32, otherwise the performance is not optimized.");
  }
  return r;
}

std::string effective_kv_cache_dtype(const std::string& user_kv_dtype, bool checkpoint_has_kv_cache_scheme) {
  if (user_kv_dtype == "auto" && checkpoint_has_kv_cache_scheme) return "fp8";
  return user_kv_dtype;
}

bool is_turboquant_boundary_layer(int layer, int num_layers) {
  int n = std::min(2, num_layers / 2);
  return layer < n || layer >= num_layers - n;
}

bool is_quantized_kv_dtype(std::string_view kv) { return starts_with(kv, "fp8") || is_turboquant_kv_dtype(kv); }

void check_kv_cache_dtype_skip_layers(const std::string& kv_cache_dtype, const std::vector<std::string>& skip_layers) {
  if (!skip_layers.empty() && !is_quantized_kv_dtype(kv_cache_dtype))
    throw_config_error("--kv-cache-dtype-skip-layers keeps some layers' KV cache unquantized, but the KV cache dtype ",
                       kv_cache_dtype, " is not quantized; give a quantized --kv-cache-dtype (fp8, fp8_e4m3, fp8_e5m2 "
                       "or a turboquant_* preset) or drop --kv-cache-dtype-skip-layers");
}

std::vector<std::string> layer_kv_cache_dtypes(const std::string& kv_cache_dtype, int num_layers,
                                               const std::vector<bool>& layer_sliding,
                                               const std::vector<std::string>& skip_layers) {
  check_kv_cache_dtype_skip_layers(kv_cache_dtype, skip_layers);
  std::vector<bool> skip(size_t(std::max(num_layers, 0)), false);
  for (const std::string& item : skip_layers) {
    if (item == "sliding_window") {
      for (int l = 0; l < num_layers; ++l)
        if (size_t(l) < layer_sliding.size() && layer_sliding[size_t(l)]) skip[size_t(l)] = true;
      continue;
    }
    const int l = parse_int_arg("--kv-cache-dtype-skip-layers", item);
    if (l < 0 || l >= num_layers)
      throw_config_error("--kv-cache-dtype-skip-layers: layer ", l, " is not a layer of the model (it has ", num_layers,
                         " layers: 0-", num_layers - 1, ")");
    skip[size_t(l)] = true;
  }
  std::vector<std::string> kv(size_t(std::max(num_layers, 0)), kv_cache_dtype);
  for (int l = 0; l < num_layers; ++l)
    if (skip[size_t(l)] || (is_turboquant_kv_dtype(kv_cache_dtype) && is_turboquant_boundary_layer(l, num_layers)))
      kv[size_t(l)] = "auto";
  return kv;
}

LayerSelection select_attention(AttentionSelector& selector, const std::vector<SelectorConfig>& layers,
                                std::optional<int> user_block_size) {
  LayerSelection s;
  for (const auto& cfg : layers) s.per_layer.push_back(selector.select(cfg));
  s.plan = selector.finalize(user_block_size);
  return s;
}

}  // namespace pagoda
