// Engine start for the attention layer: configuration resolution (spec §3.7, §6.3, §7.2 warnings), then
// selection for every layer and finalisation. The engine and `pagoda backends select` both run this.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pagoda/attention/selector.h"
#include "pagoda/config/engine_args.h"

namespace pagoda {

struct ResolvedAttentionSettings {
  AttentionConfig attention;  // after the TurboQuant override
  std::string kv_cache_dtype;
  std::optional<int> user_block_size;
  bool batch_invariant = false;
  std::optional<KvLayout> env_layout;
};

// Logs the configuration-resolution warnings (use_trtllm_attention, TurboQuant, CPU block size).
ResolvedAttentionSettings resolve_attention_settings(const ValidatedArgs& args, DeviceKind device);

// §2.1: the checkpoint's kv_cache_scheme turns a user's `auto` into fp8.
std::string effective_kv_cache_dtype(const std::string& user_kv_dtype, bool checkpoint_has_kv_cache_scheme);
// §3.7: TurboQuant boundary layers keep an uncompressed (`auto`) cache.
bool is_turboquant_boundary_layer(int layer, int num_layers);

struct LayerSelection {
  std::vector<BackendName> per_layer;
  AttentionPlan plan;
};

// Selects every layer (in order), then finalises. Throws selection and construction errors.
LayerSelection select_attention(AttentionSelector& selector, const std::vector<SelectorConfig>& layers,
                                std::optional<int> user_block_size);

}  // namespace pagoda
