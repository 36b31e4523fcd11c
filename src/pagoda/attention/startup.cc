#include "pagoda/attention/startup.h"

#include <algorithm>

#include "pagoda/attention/selector_config.h"
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

LayerSelection select_attention(AttentionSelector& selector, const std::vector<SelectorConfig>& layers,
                                std::optional<int> user_block_size) {
  LayerSelection s;
  for (const auto& cfg : layers) s.per_layer.push_back(selector.select(cfg));
  s.plan = selector.finalize(user_block_size);
  return s;
}

}  // namespace pagoda
