// FP8 KV-cache scales stored in a checkpoint (vLLM's k_scale / v_scale). An fp8 cache holds k / k_scale and
// v / v_scale; attention multiplies by the scale when it reads. A checkpoint calibrated for an fp8 cache
// carries them per attention layer, and per KV head under compressed-tensors' "attn_head" strategy.
#pragma once

#include <vector>

#include "pagoda/model/model_config.h"

namespace pagoda {

class SafetensorsCheckpoint;

// The scales of one attention layer. Each is finite and > 0.
struct KvScales {
  // Per-tensor scales. For a per-head checkpoint, the largest head's scale (what vLLM's _k_scale_float holds
  // for kernels that take one scale): quantizing with the largest scale never overflows any head.
  float k = 1.0f, v = 1.0f;
  // [num_kv_heads] each when the checkpoint stores a per-head scale for k or v (shape [num_kv_heads], or
  // [num_kv_heads, 1, 1] as compressed-tensors writes it); a per-tensor partner is repeated per head. Both
  // empty when every scale of the layer is per-tensor (shape [], [1], [1, 1], ...).
  std::vector<float> k_per_head, v_per_head;

  bool per_head() const { return !k_per_head.empty(); }
};

// Reads the KV-cache scales of every layer i from these tensors (as vLLM's maybe_remap_kv_scale_name and
// compressed-tensors' get_cache_scale map them), dtype F32, BF16 or F16:
//   k: model.layers.{i}.self_attn.k_scale, .self_attn.k_proj.k_scale (ModelOpt), .self_attn.k_proj.output_scale
//      (older compressed-tensors), .self_attn.kv_scale (deprecated: one scale for k and v)
//   v: the same with v (v_scale, v_proj.v_scale, v_proj.output_scale, kv_scale)
// Other attention quantization tensors (q_scale, zero points) are not read and do no harm.
//
// Returns [num_layers] when config.json declares a kv_cache_scheme or the checkpoint holds any of these
// tensors, else empty (no scales: an fp8 cache then uses 1.0, as vLLM does). A layer without a k (or v)
// scale gets 1.0, as vLLM does (compressed-tensors in vLLM fills missing scales with ones; its FP8 path warns
// that 1.0 may cost accuracy). With `fp8_kv_cache` (the scales will be used) that fallback gets one warning
// naming the layers, and the scales loaded one info line; without it nothing is logged, as an unquantized
// cache ignores them.
//
// Throws a config pagoda::Error naming the tensor and file: a dtype other than F32/BF16/F16; a shape that is
// neither one element nor num_kv_heads along the first dimension; a value that is not finite and > 0; two
// names of one layer's scale (say k_scale and kv_scale) that disagree.
std::vector<KvScales> load_kv_scales(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, bool fp8_kv_cache);

}  // namespace pagoda
