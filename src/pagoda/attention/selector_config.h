// The selector input of one attention layer (spec §2.1) and its exact text form (§2.2).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "pagoda/core/dtype.h"

namespace pagoda {

enum class AttnType { kDecoder, kEncoder, kEncoderOnly, kEncoderDecoder };
std::string_view attn_type_str(AttnType t);
std::optional<AttnType> parse_attn_type(std::string_view s);

struct SelectorConfig {
  int head_size = 128;
  DType dtype = DType::kBF16;  // bfloat16, float16 or float32
  std::string kv_cache_dtype = "auto";
  std::optional<int> block_size;  // only when the user gave one
  bool has_sink = false;
  bool use_per_head_quant_scales = false;
  AttnType attn_type = AttnType::kDecoder;
  bool has_sliding_window = false;
  bool use_non_causal = false;
  bool use_batch_invariant = false;

  // AttentionSelectorConfig(head_size=128, dtype=bfloat16, ...), exact.
  std::string repr() const;
  // The backend_per_kind kind of a layer with this configuration (§5.1 step 2).
  std::string_view layer_kind() const;

  auto key() const {
    return std::tie(head_size, dtype, kv_cache_dtype, block_size, has_sink, use_per_head_quant_scales, attn_type,
                    has_sliding_window, use_non_causal, use_batch_invariant);
  }
  bool operator<(const SelectorConfig& o) const { return key() < o.key(); }
  bool operator==(const SelectorConfig& o) const { return key() == o.key(); }
};

bool is_fp8_kv_dtype(std::string_view kv);         // fp8, fp8_e4m3, fp8_e5m2
bool is_turboquant_kv_dtype(std::string_view kv);  // turboquant_*

}  // namespace pagoda
