#include "pagoda/model/model_runner.h"

#include <algorithm>

#include "pagoda/core/error.h"

namespace pagoda {

LayerShape model_layer_shape(const ModelConfig& c, int layer, DType dtype, DType kv_dtype, KvLayout layout,
                             int block_size, bool causal) {
  LayerShape s;
  s.num_q_heads = c.num_heads;
  s.num_kv_heads = c.num_kv_heads;
  s.head_size = c.head_dim;
  s.dtype = dtype;
  s.kv_dtype = kv_dtype;
  s.layout = layout;
  s.block_size = block_size;
  s.sliding_window = c.uses_sliding_window(layer) ? c.sliding_window : 0;
  s.causal = causal;
  return s;
}

void set_layer_kv_cache_dtype(LayerShape& shape, const std::string& kv_cache_dtype, DType model_dtype) {
  shape.kv_dtype = kv_cache_element_dtype(kv_cache_dtype, model_dtype);
  shape.kv_preset = is_turboquant_kv_dtype(kv_cache_dtype) ? kv_cache_dtype : std::string();
}

std::vector<AttentionGroup> group_attention_layers(const ModelConfig& c,
                                                   const std::vector<std::shared_ptr<const AttentionBackend>>& backends,
                                                   DType dtype, const std::vector<std::string>& kv_cache_dtypes,
                                                   DType model_dtype, KvLayout layout, int block_size, bool causal,
                                                   const RunnerOptions& options) {
  PAGODA_CHECK(int(backends.size()) == c.num_layers, "one backend per layer: ", backends.size(), " for ", c.num_layers);
  PAGODA_CHECK(int(kv_cache_dtypes.size()) == c.num_layers, "one KV cache dtype per layer: ", kv_cache_dtypes.size(),
               " for ", c.num_layers);
  std::vector<AttentionGroup> groups;
  for (int l = 0; l < c.num_layers; ++l) {
    LayerShape shape = model_layer_shape(c, l, dtype, DType::kU8, layout, block_size, causal);
    set_layer_kv_cache_dtype(shape, kv_cache_dtypes[size_t(l)], model_dtype);
    const auto& backend = backends[size_t(l)];
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const AttentionGroup& g) { return g.backend == backend && g.shape == shape; });
    if (it == groups.end()) it = groups.insert(groups.end(), AttentionGroup{backend, shape, options, {}});
    it->layers.push_back(l);
  }
  return groups;
}

std::vector<AttentionGroup> group_attention_layers(const ModelConfig& c,
                                                   const std::vector<std::shared_ptr<const AttentionBackend>>& backends,
                                                   DType dtype, DType kv_dtype, KvLayout layout, int block_size,
                                                   bool causal, const RunnerOptions& options) {
  // `auto` resolved against kv_dtype is kv_dtype itself.
  return group_attention_layers(c, backends, dtype, std::vector<std::string>(size_t(c.num_layers), "auto"), kv_dtype,
                                layout, block_size, causal, options);
}

int64_t kv_block_bytes(const AttentionGroup& g) {
  const LayerShape& s = g.shape;
  const KvCacheShape shape = g.backend->kv_cache_shape(1, s.block_size, s.num_kv_heads, s.head_size,
                                                       s.kv_preset.empty() ? "auto" : s.kv_preset, s.kv_dtype, s.layout);
  int64_t elements = 1;
  for (int64_t d : shape.physical) elements *= d;
  return elements * shape.element_bytes;
}

int64_t kv_block_bytes(const std::vector<AttentionGroup>& groups) {
  int64_t bytes = 0;
  for (const auto& g : groups) bytes += kv_block_bytes(g) * int64_t(g.layers.size());
  return bytes;
}

}  // namespace pagoda
