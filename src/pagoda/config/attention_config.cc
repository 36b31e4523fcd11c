#include "pagoda/config/attention_config.h"

#include <cctype>
#include <cmath>

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/core/json_depth.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void validation_error(std::string_view field, std::string_view message) {
  throw_config_error("1 validation error for AttentionConfig\n", text_preview(field), "\n  ", message);
}

bool parse_bool(const Json& v, std::string_view field) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() || v.is_number_unsigned()) {
    auto i = v.get<long long>();
    if (i == 0 || i == 1) return i == 1;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d == 0.0 || d == 1.0) return d == 1.0;
  }
  if (v.is_string()) {
    std::string s = to_lower(v.get<std::string>());
    for (const char* t : {"true", "yes", "on", "t", "y", "1"}) if (s == t) return true;
    for (const char* f : {"false", "no", "off", "f", "n", "0"}) if (s == f) return false;
  }
  validation_error(field, "Input should be a valid boolean");
}

int parse_int(const Json& v, std::string_view field) {
  if (v.is_number_integer() || v.is_number_unsigned()) {
    long long i = v.get<long long>();
    if (i >= INT32_MIN && i <= INT32_MAX) return int(i);
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 2147483648.0) return int(d);
  } else if (v.is_string()) {
    long long i = 0;
    std::string s = v.get<std::string>();
    bool digits = !s.empty();
    for (char c : s) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    if (digits && parse_int64(s, &i) && i <= INT32_MAX) return int(i);
  }
  validation_error(field, "Input should be a valid integer");
}

std::optional<int> parse_optional_int(const Json& v, std::string_view field) {
  if (v.is_null()) return std::nullopt;
  return parse_int(v, field);
}

std::optional<BackendName> parse_backend_value(const Json& v, std::string_view field) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_string()) validation_error(field, "Input should be a valid string");
  return parse_backend_name(v.get<std::string>());
}

std::string json_error_detail(const std::exception& e) {
  std::string what = e.what();
  // nlohmann prefixes "[json.exception.parse_error.101] "; the user needs only the description.
  if (!what.empty() && what[0] == '[') {
    auto close = what.find("] ");
    if (close != std::string::npos) what = what.substr(close + 2);
  }
  return what;
}

}  // namespace

std::string_view backend_name_str(BackendName b) {
  switch (b) {
    case BackendName::kFlashAttn: return "FLASH_ATTN";
    case BackendName::kFlashInfer: return "FLASHINFER";
    case BackendName::kTritonAttn: return "TRITON_ATTN";
    case BackendName::kFlexAttention: return "FLEX_ATTENTION";
    case BackendName::kTurboQuant: return "TURBOQUANT";
    case BackendName::kCpuAttn: return "CPU_ATTN";
  }
  return "?";
}

std::optional<BackendName> parse_backend_name(std::string_view s, bool allow_empty_and_none) {
  if (allow_empty_and_none && (s.empty() || s == "None")) return std::nullopt;
  std::string upper = to_upper(s);
  if (upper == "AUTO") return std::nullopt;
  for (BackendName b : kAllBackendNames)
    if (backend_name_str(b) == upper) return b;
  std::vector<std::string> names;
  for (BackendName b : kAllBackendNames) names.emplace_back(backend_name_str(b));
  throw_config_error("Unknown attention backend: '", text_preview(upper), "'. Valid options are: ", join(names, ", "));
}

std::optional<BackendName> AttentionConfig::forced_backend_for_kind(std::string_view kind) const {
  for (const auto& [k, b] : backend_per_kind)
    if (k == kind) return b;
  return backend;
}

std::string AttentionConfig::to_json() const {
  Json j;
  j["backend"] = backend ? Json(std::string(backend_name_str(*backend))) : Json(nullptr);
  Json per = Json::object();
  for (const auto& [k, b] : backend_per_kind) per[k] = b ? Json(std::string(backend_name_str(*b))) : Json("auto");
  j["backend_per_kind"] = per;
  j["flash_attn_version"] = flash_attn_version ? Json(*flash_attn_version) : Json(nullptr);
  j["use_prefill_decode_attention"] = use_prefill_decode_attention;
  j["flash_attn_max_num_splits_for_cuda_graph"] = flash_attn_max_num_splits_for_cuda_graph;
  j["use_trtllm_attention"] = use_trtllm_attention ? Json(*use_trtllm_attention) : Json(nullptr);
  j["disable_flashinfer_q_quantization"] = disable_flashinfer_q_quantization;
  j["use_non_causal"] = use_non_causal;
  j["flex_attn_block_m"] = flex_attn_block_m ? Json(*flex_attn_block_m) : Json(nullptr);
  j["flex_attn_block_n"] = flex_attn_block_n ? Json(*flex_attn_block_n) : Json(nullptr);
  j["tq_max_kv_splits_for_cuda_graph"] = tq_max_kv_splits_for_cuda_graph;
  j["use_cascade_attention"] = use_cascade_attention;
  return j.dump();
}

std::string replace_human_readable_ints(std::string_view text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == '"') {  // copy a whole string literal, escapes included
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') j += (text[j] == '\\') ? 2 : 1;
      j = std::min(j + 1, text.size());
      out.append(text.substr(i, j - i));
      i = j;
      continue;
    }
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') {
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_' || text[j] == '.')) ++j;
      std::string_view tok = text.substr(i, j - i);
      bool match = tok.size() >= 2 && std::string_view("kKmMgGtT").find(tok.back()) != std::string_view::npos;
      for (size_t k = 0; match && k + 1 < tok.size(); ++k) match = std::isdigit(static_cast<unsigned char>(tok[k]));
      long long n = 0;
      if (match && parse_int64(tok.substr(0, tok.size() - 1), &n)) {
        int p = int(std::string_view("kmgt").find(char(std::tolower(tok.back())))) + 1;
        bool binary = std::isupper(static_cast<unsigned char>(tok.back()));
        bool overflow = false;
        for (int e = 0; e < p; ++e) overflow = overflow || __builtin_mul_overflow(n, binary ? 1024 : 1000, &n);
        // Beyond int64 the token stays as written, and the JSON parse below refuses it.
        if (overflow) out.append(tok);
        else out += std::to_string(n);
      } else {
        out.append(tok);
      }
      i = j;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

AttentionConfig parse_attention_config_json(std::string_view text) {
  check_json_depth(text, "attention_config");
  Json j;
  try {
    j = Json::parse(replace_human_readable_ints(text));
  } catch (const std::exception& e) {
    validation_error("attention_config", "Invalid JSON: " + text_preview(json_error_detail(e), 200));
  }
  if (!j.is_object()) validation_error("attention_config", "Input should be a valid dictionary");

  AttentionConfig c;
  for (const auto& [key, v] : j.items()) {  // left to right: the first failure is reported
    if (key == "backend") {
      c.backend = parse_backend_value(v, key);
    } else if (key == "backend_per_kind") {
      if (!v.is_object()) validation_error(key, "Input should be a valid dictionary");
      c.backend_per_kind.clear();
      for (const auto& [kind, b] : v.items()) {
        bool known = false;
        for (auto k : kLayerKinds) known = known || k == kind;
        if (!known)
          throw_config_error("Unknown KV cache group kind '", text_preview(kind), "' in backend_per_kind. Valid kinds are: ",
                             "cross_attention, encoder_only_attention, full_attention, sliding_window.");
        c.backend_per_kind.emplace_back(kind, parse_backend_value(b, "backend_per_kind." + kind));
      }
    } else if (key == "flash_attn_version") {
      if (v.is_null()) {
        c.flash_attn_version.reset();
      } else {
        bool ok = (v.is_number_integer() || v.is_number_unsigned()) && v.get<long long>() >= 2 && v.get<long long>() <= 4;
        if (!ok) validation_error(key, "Input should be 2, 3 or 4");
        c.flash_attn_version = int(v.get<long long>());
      }
    } else if (key == "use_prefill_decode_attention") {
      c.use_prefill_decode_attention = parse_bool(v, key);
    } else if (key == "flash_attn_max_num_splits_for_cuda_graph") {
      c.flash_attn_max_num_splits_for_cuda_graph = parse_int(v, key);
    } else if (key == "use_trtllm_attention") {
      if (v.is_null()) c.use_trtllm_attention.reset();
      else c.use_trtllm_attention = parse_bool(v, key);
    } else if (key == "disable_flashinfer_q_quantization") {
      c.disable_flashinfer_q_quantization = parse_bool(v, key);
    } else if (key == "use_non_causal") {
      c.use_non_causal = parse_bool(v, key);
    } else if (key == "flex_attn_block_m") {
      c.flex_attn_block_m = parse_optional_int(v, key);
    } else if (key == "flex_attn_block_n") {
      c.flex_attn_block_n = parse_optional_int(v, key);
    } else if (key == "tq_max_kv_splits_for_cuda_graph") {
      c.tq_max_kv_splits_for_cuda_graph = parse_int(v, key);
    } else if (key == "use_cascade_attention") {
      c.use_cascade_attention = parse_bool(v, key);
    } else {
      validation_error(key, "Extra inputs are not permitted");
    }
  }
  return c;
}

}  // namespace pagoda
