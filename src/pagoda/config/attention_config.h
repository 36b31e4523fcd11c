// AttentionConfig (spec §9.1) and backend-name parsing (§1.2), with the exact validation errors of §9.2.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda {

// Canonical order (§1.1); it is also the order of the unknown-name error.
enum class BackendName { kFlashAttn, kFlashInfer, kTritonAttn, kFlexAttention, kTurboQuant, kCpuAttn };
inline constexpr std::array<BackendName, 6> kAllBackendNames = {
    BackendName::kFlashAttn, BackendName::kFlashInfer, BackendName::kTritonAttn,
    BackendName::kFlexAttention, BackendName::kTurboQuant, BackendName::kCpuAttn};

std::string_view backend_name_str(BackendName b);
// §1.2: case-insensitive; "auto" (and, when allow_none, "" and "None") means automatic (nullopt).
// Any other unknown name throws the exact "Unknown attention backend" config error.
std::optional<BackendName> parse_backend_name(std::string_view s, bool allow_empty_and_none = false);

// Layer kinds of backend_per_kind (§5.1), in the order of the unknown-kind error.
inline constexpr std::array<std::string_view, 4> kLayerKinds = {
    "cross_attention", "encoder_only_attention", "full_attention", "sliding_window"};

struct AttentionConfig {
  std::optional<BackendName> backend;  // forced backend; nullopt = automatic
  // kind -> backend (nullopt = "auto": that kind is selected automatically), in the order given.
  std::vector<std::pair<std::string, std::optional<BackendName>>> backend_per_kind;
  std::optional<int> flash_attn_version;  // 2, 3, 4 or null
  bool use_prefill_decode_attention = false;
  int flash_attn_max_num_splits_for_cuda_graph = 32;
  std::optional<bool> use_trtllm_attention;
  bool disable_flashinfer_q_quantization = false;
  bool use_non_causal = false;
  std::optional<int> flex_attn_block_m;
  std::optional<int> flex_attn_block_n;
  int tq_max_kv_splits_for_cuda_graph = 32;
  // pagoda addition: FLASHINFER attends a prefix that running requests share (the same full blocks) once for
  // all of them and merges it with each request's suffix (cascade attention). Off by default, as in vLLM.
  bool use_cascade_attention = false;

  // The forced backend of a layer of the given kind (§5.1 step 2).
  std::optional<BackendName> forced_backend_for_kind(std::string_view kind) const;
  // Compact JSON of every field (startup config dump, tests).
  std::string to_json() const;
};

// Parses a whole --attention-config value: bare k/M/G/T tokens outside strings become integers, then JSON,
// then field validation (§9.2). Throws config errors with the exact texts.
AttentionConfig parse_attention_config_json(std::string_view text);
// §9.3: replaces bare tokens outside JSON strings that match digits + one of kKmMgGtT by integers.
std::string replace_human_readable_ints(std::string_view json_text);

}  // namespace pagoda
