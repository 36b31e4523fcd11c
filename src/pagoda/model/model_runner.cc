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

std::vector<AttentionGroup> group_attention_layers(const ModelConfig& c,
                                                   const std::vector<std::shared_ptr<const AttentionBackend>>& backends,
                                                   DType dtype, DType kv_dtype, KvLayout layout, int block_size,
                                                   bool causal, const RunnerOptions& options) {
  PAGODA_CHECK(int(backends.size()) == c.num_layers, "one backend per layer: ", backends.size(), " for ", c.num_layers);
  std::vector<AttentionGroup> groups;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerShape shape = model_layer_shape(c, l, dtype, kv_dtype, layout, block_size, causal);
    const auto& backend = backends[size_t(l)];
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const AttentionGroup& g) { return g.backend == backend && g.shape == shape; });
    if (it == groups.end()) it = groups.insert(groups.end(), AttentionGroup{backend, shape, options, {}});
    it->layers.push_back(l);
  }
  return groups;
}

}  // namespace pagoda
