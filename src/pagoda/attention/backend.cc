#include "pagoda/attention/backend.h"

#include <algorithm>

#include "pagoda/core/error.h"

namespace pagoda {

bool HeadSizeRule::supports(int h) const {
  if (!exact.empty() && std::find(exact.begin(), exact.end(), h) == exact.end()) return false;
  return h % multiple_of == 0 && h >= min && h <= max;
}

bool CcRule::supports(ComputeCapability cc) const {
  if (!cuda) return false;
  if (cc < min) return false;
  return !max || cc <= *max;
}

std::vector<std::string> AttentionBackend::why_not(const SelectorConfig& cfg, const SelectionEnv& env) const {
  const Capabilities caps = capabilities(cfg, env);
  std::vector<std::string> r;
  if (!caps.head_sizes.supports(cfg.head_size)) r.push_back("head_size not supported");
  if (std::find(caps.dtypes.begin(), caps.dtypes.end(), cfg.dtype) == caps.dtypes.end()) r.push_back("dtype not supported");
  if (std::find(caps.kv_cache_dtypes.begin(), caps.kv_cache_dtypes.end(), cfg.kv_cache_dtype) == caps.kv_cache_dtypes.end())
    r.push_back("kv_cache_dtype not supported");
  if (cfg.block_size && !caps.block_sizes.empty()) {
    bool ok = false;
    for (const auto& b : caps.block_sizes) ok = ok || *cfg.block_size % b.size == 0;
    if (!ok) r.push_back("block_size not supported");
  }
  if (cfg.has_sink && !caps.sinks) r.push_back("attention sinks not supported");
  if (cfg.use_per_head_quant_scales && !caps.per_head_quant_scales) r.push_back("per-head quant scales not supported");
  if (!caps.compute_capability.supports(env.cc)) r.push_back("compute capability not supported");
  if (std::find(caps.attn_types.begin(), caps.attn_types.end(), cfg.attn_type) == caps.attn_types.end())
    r.push_back(str_cat("attention type ", attn_type_str(cfg.attn_type), " not supported"));
  if (cfg.has_sliding_window && !caps.sliding_window) r.push_back("sliding window not supported");
  if (cfg.use_non_causal && !caps.non_causal) r.push_back("non-causal attention not supported");
  if (cfg.use_batch_invariant && !caps.batch_invariant) r.push_back("batch invariance not supported");
  if (auto text = combination_rule(cfg, env)) r.push_back(*text);
  return r;
}

int AttentionBackend::preferred_block_size(const SelectorConfig& cfg, const SelectionEnv& env, int default_size) const {
  const Capabilities caps = capabilities(cfg, env);
  if (caps.block_sizes.empty()) return default_size;
  int smallest = INT_MAX;
  for (const auto& b : caps.block_sizes) {
    if (default_size % b.size == 0) return default_size;
    smallest = std::min(smallest, b.size);
  }
  return smallest;
}

DType kv_cache_element_dtype(const std::string& kv, DType model_dtype) {
  if (kv == "auto") return model_dtype;
  if (kv == "float16") return DType::kF16;
  if (kv == "bfloat16") return DType::kBF16;
  if (kv == "fp8" || kv == "fp8_e4m3") return DType::kF8E4M3;
  if (kv == "fp8_e5m2") return DType::kF8E5M2;
  return DType::kU8;  // turboquant_*: packed bytes
}

KvCacheShape AttentionBackend::kv_cache_shape(int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                                              int64_t head_size, const std::string& kv_cache_dtype,
                                              DType model_dtype, KvLayout layout) const {
  if (block_size % 16 != 0) throw_runtime_error("Block size must be a multiple of 16.");
  KvCacheShape s;
  s.logical = {num_blocks, num_kv_heads, block_size, 2 * head_size};
  s.physical = layout == KvLayout::kNHD ? std::vector<int64_t>{num_blocks, block_size, num_kv_heads, 2 * head_size}
                                        : s.logical;
  s.element_bytes = int64_t(dtype_size(kv_cache_element_dtype(kv_cache_dtype, model_dtype)));
  return s;
}

}  // namespace pagoda

namespace pagoda {

std::unique_ptr<AttentionRunner> AttentionBackend::make_runner(const LayerShape&, const RunnerOptions&) const {
  throw_runtime_error("attention backend ", backend_name_str(name()), " is not built in this binary");
}

}  // namespace pagoda
