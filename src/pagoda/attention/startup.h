// Engine start for the attention layer: configuration resolution (spec §3.7, §6.3, §7.2 warnings), then
// selection for every layer and finalisation. The engine and `pagoda backends select` both run this.
#pragma once

#include <optional>
#include <string>
#include <string_view>
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
// fp8, fp8_e4m3, fp8_e5m2 and the turboquant_* presets.
bool is_quantized_kv_dtype(std::string_view kv_cache_dtype);

// --kv-cache-dtype-skip-layers needs a quantized kv_cache_dtype (a config error otherwise).
void check_kv_cache_dtype_skip_layers(const std::string& kv_cache_dtype, const std::vector<std::string>& skip_layers);

// The KV cache dtype of each of a model's layers: `kv_cache_dtype` (after effective_kv_cache_dtype), except
// `auto` for the TurboQuant boundary layers (turboquant_* only) and the layers `skip_layers` names
// (--kv-cache-dtype-skip-layers: indices, or sliding_window = every l with layer_sliding[l]). Throws a config
// error when skip_layers is given with an unquantized dtype or names a layer the model does not have.
std::vector<std::string> layer_kv_cache_dtypes(const std::string& kv_cache_dtype, int num_layers,
                                               const std::vector<bool>& layer_sliding,
                                               const std::vector<std::string>& skip_layers);

struct LayerSelection {
  std::vector<BackendName> per_layer;
  AttentionPlan plan;
};

// Selects every layer (in order), then finalises. Throws selection and construction errors.
LayerSelection select_attention(AttentionSelector& selector, const std::vector<SelectorConfig>& layers,
                                std::optional<int> user_block_size);

}  // namespace pagoda
