#include "pagoda/model/model_config.h"

#include <cmath>
#include <filesystem>

#include "pagoda/core/error.h"
#include "pagoda/core/json_checks.h"
#include "pagoda/core/json_depth.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/read_file.h"
#include "pagoda/model/architecture.h"

namespace pagoda {

using nlohmann::json;

std::string_view architecture_name(Architecture a) { return architecture_spec(a).hf_name; }

const ArchitectureSpec& architecture_spec(Architecture a) {
  switch (a) {
    case Architecture::kLlama: return llama_architecture();
    case Architecture::kQwen2: return qwen2_architecture();
    case Architecture::kQwen3: return qwen3_architecture();
    case Architecture::kMistral: return mistral_architecture();
  }
  return llama_architecture();
}

namespace {
const ArchitectureSpec* const* all_architectures() {
  static const ArchitectureSpec* const kAll[] = {&llama_architecture(), &qwen2_architecture(), &qwen3_architecture(),
                                                 &mistral_architecture(), nullptr};
  return kAll;
}
}  // namespace

const ArchitectureSpec* find_architecture(std::string_view hf_name) {
  for (auto* const* a = all_architectures(); *a; ++a)
    if ((*a)->hf_name == hf_name) return *a;
  return nullptr;
}

std::string supported_architectures() {
  std::string s;
  for (auto* const* a = all_architectures(); *a; ++a) s += (s.empty() ? "" : ", ") + std::string((*a)->hf_name);
  return s;
}

bool json_bool(const json& j, const char* key, bool def, const std::string& label) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean())
    throw_config_error(label, ": field '", key, "' must be true or false, got ", json_preview(*it));
  return it->get<bool>();
}

namespace {

// An integer field in [lo, hi]; `def` when absent or null. `limit_note` says why hi is the bound.
int64_t json_int_in(const json& j, const char* key, int64_t def, int64_t lo, int64_t hi, const std::string& label,
                    std::string_view limit_note = {}) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  const std::optional<int64_t> v = json_integral(*it);
  if (!v) throw_config_error(label, ": field '", key, "' must be an integer, got ", json_preview(*it));
  if (*v < lo || *v > hi)
    throw_config_error(label, ": field '", key, "' is ", *v, ", outside [", lo, ", ", hi, "]",
                       limit_note.empty() ? "" : " (", limit_note, limit_note.empty() ? "" : ")",
                       "; is this the model's own config.json?");
  return *v;
}

}  // namespace

int json_int(const json& j, const char* key, int def, const std::string& label) {
  return int(json_int_in(j, key, def, INT32_MIN, INT32_MAX, label));
}

namespace {

// A size that drives allocations: required, in [1, max].
int required_size(const json& j, const char* key, int max, const std::string& label, std::string_view limit_note) {
  if (!j.contains(key) || j[key].is_null()) throw_config_error(label, ": missing required field '", key, "'");
  return int(json_int_in(j, key, 0, 1, max, label, limit_note));
}

double json_number(const json& j, const char* key, double def, const std::string& label) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number()) throw_config_error(label, ": field '", key, "' must be a number, got ", json_preview(*it));
  const double v = it->get<double>();
  if (!std::isfinite(v)) throw_config_error(label, ": field '", key, "' must be finite");
  return v;
}

// One token id of `key` (`index` >= 0 for an entry of a list): an integer in [0, vocab_size).
int token_id(const json& x, const char* key, int index, int vocab_size, const std::string& label) {
  const std::string field = index < 0 ? std::string(key) : str_cat(key, "[", index, "]");
  const std::optional<int64_t> v = json_integral(x);
  if (!v) throw_config_error(label, ": '", field, "' must be a token id (an integer), got ", json_preview(x));
  if (*v < 0 || *v >= vocab_size)
    throw_config_error(label, ": '", field, "' is ", *v, ", not a token id of this model (vocab_size ", vocab_size,
                       ": ids are 0..", vocab_size - 1, "); fix the id or remove the field");
  return int(*v);
}

// eos_token_id: null, one id or a list of ids.
std::vector<int> token_id_list(const json& v, const char* key, int vocab_size, const std::string& label) {
  std::vector<int> out;
  if (v.is_null()) return out;
  if (!v.is_array()) return {token_id(v, key, -1, vocab_size, label)};
  int i = 0;
  for (const auto& x : v) out.push_back(token_id(x, key, i++, vocab_size, label));
  return out;
}

// bos_token_id: `def` when absent, -1 when null, else an id.
int optional_token_id(const json& j, const char* key, int def, int vocab_size, const std::string& label) {
  auto it = j.find(key);
  if (it == j.end()) return def;
  if (it->is_null()) return -1;
  return token_id(*it, key, -1, vocab_size, label);
}

// pad_token_id is never used by pagoda, so any id is accepted (some checkpoints add a pad token past the
// embedding rows, old Llama configs say -1); only its type and int32 range are checked.
void check_pad_token_id(const json& j, const std::string& label) {
  (void)json_int_in(j, "pad_token_id", -1, -1, INT32_MAX, label);
}

// rope_parameters (transformers 5) or rope_theta + rope_scaling (classic).
void parse_rope(const json& j, const std::string& label, ModelConfig& c) {
  const json* scaling = nullptr;
  const std::string where = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? "rope_parameters" : "rope_scaling";
  if (where == "rope_parameters") {
    scaling = &j["rope_parameters"];
    c.rope_theta = json_number(*scaling, "rope_theta", json_number(j, "rope_theta", 10000.0, label), label);
    const double classic = json_number(j, "rope_theta", c.rope_theta, label);
    if (classic != c.rope_theta)
      PAGODA_LOG_WARNING(label, ": rope_parameters.rope_theta ", c.rope_theta, " differs from rope_theta ", classic,
                         "; using rope_parameters (transformers 5)");
  } else {
    c.rope_theta = json_number(j, "rope_theta", 10000.0, label);
    auto it = j.find("rope_scaling");
    if (it != j.end() && !it->is_null()) {
      if (!it->is_object()) throw_config_error(label, ": 'rope_scaling' must be an object or null");
      scaling = &*it;
    }
  }
  if (c.rope_theta <= 0) throw_config_error(label, ": rope_theta must be positive, got ", c.rope_theta);
  if (!scaling) return;
  std::string type = "default";
  for (const char* k : {"rope_type", "type"}) {
    auto t = scaling->find(k);
    if (t != scaling->end() && !t->is_null()) {
      if (!t->is_string()) throw_config_error(label, ": ", where, ".", k, " must be a string, got ", json_preview(*t));
      type = t->get<std::string>();
      break;
    }
  }
  RopeScaling& r = c.rope_scaling;
  r.type = type;
  if (type == "default") return;
  auto need = [&](const char* k) {
    if (!scaling->contains(k)) throw_config_error(label, ": ", where, " of type '", type, "' needs '", k, "'");
    return json_number(*scaling, k, 0.0, label);
  };
  if (type == "linear") {
    r.factor = need("factor");
  } else if (type == "llama3") {
    r.factor = need("factor");
    r.low_freq_factor = need("low_freq_factor");
    r.high_freq_factor = need("high_freq_factor");
    if (!scaling->contains("original_max_position_embeddings"))
      throw_config_error(label, ": ", where, " of type 'llama3' needs 'original_max_position_embeddings'");
    r.original_max_position_embeddings = int(json_int_in(*scaling, "original_max_position_embeddings", 0, 1,
                                                         kMaxPositionEmbeddings, label + ": " + where));
    if (r.high_freq_factor <= r.low_freq_factor)
      throw_config_error(label, ": llama3 rope scaling needs high_freq_factor > low_freq_factor");
  } else {
    throw_config_error(label, ": rope type '", text_preview(type), "' is not supported (supported: default, linear, llama3)");
  }
  if (r.factor <= 0) throw_config_error(label, ": rope scaling factor must be positive, got ", r.factor);
}

void parse_quantization(const json& j, const std::string& label, ModelConfig& c) {
  auto q = j.find("quantization_config");
  if (q == j.end() || q->is_null()) return;
  if (!q->is_object()) throw_config_error(label, ": 'quantization_config' must be an object");
  auto kv = q->find("kv_cache_scheme");
  if (kv != q->end() && !kv->is_null()) {
    c.has_kv_cache_scheme = true;
    if (kv->is_object() && kv->contains("strategy") && (*kv)["strategy"].is_string())
      c.kv_cache_scheme_strategy = (*kv)["strategy"].get<std::string>();
  }
  // Weight quantization is not implemented: refuse rather than compute garbage.
  auto groups = q->find("config_groups");
  const bool has_groups = groups != q->end() && !groups->is_null() && !groups->empty();
  std::string method = q->contains("quant_method") && (*q)["quant_method"].is_string() ? (*q)["quant_method"].get<std::string>() : "";
  if (has_groups || (!method.empty() && method != "compressed-tensors"))
    throw_config_error(label, ": quantized weights (quant_method '", method.empty() ? "compressed-tensors" : text_preview(method),
                       "') are not supported; use an unquantized checkpoint");
}

}  // namespace

ModelConfig parse_model_config_text(const std::string& text, const std::string& label, const std::string& gen_text,
                                    const std::string& gen_label) {
  check_json_depth(text, label);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw_config_error(label, ": not valid JSON");
  if (!j.is_object()) throw_config_error(label, ": not a JSON object");
  ModelConfig c;
  try {
    // Architecture: the first known name of "architectures", else model_type.
    const ArchitectureSpec* spec = nullptr;
    std::string names;
    if (auto a = j.find("architectures"); a != j.end() && !a->is_null()) {
      if (!a->is_array()) throw_config_error(label, ": 'architectures' must be a list of names, got ", json_preview(*a));
      for (const auto& n : *a) {
        if (!n.is_string()) throw_config_error(label, ": 'architectures' must be a list of names, found ", json_preview(n));
        names += (names.empty() ? "" : ", ") + n.get<std::string>();
        if (!spec) spec = find_architecture(n.get<std::string>());
      }
    } else if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) {
      names = "model_type " + mt->get<std::string>();
      for (Architecture a : {Architecture::kLlama, Architecture::kQwen2, Architecture::kQwen3, Architecture::kMistral})
        if (architecture_spec(a).model_type == mt->get<std::string>()) spec = &architecture_spec(a);
    } else {
      throw_config_error(label, ": missing 'architectures' (and 'model_type'); supported: ", supported_architectures());
    }
    if (!spec)
      throw_config_error(label, ": unknown architecture '", text_preview(names, 100), "' (supported: ", supported_architectures(), ")");
    c.arch = spec->arch;
    c.architecture_name = std::string(spec->hf_name);

    // Sizes, each bounded before anything is sized by it, then checked against each other.
    c.vocab_size = required_size(j, "vocab_size", kMaxVocabSize, label, "pagoda's vocabulary limit");
    c.hidden_size = required_size(j, "hidden_size", kMaxHiddenSize, label, "pagoda's limit; Llama 3.1 405B has 16384");
    c.intermediate_size = required_size(j, "intermediate_size", kMaxIntermediateSize, label, "pagoda's limit");
    c.num_layers = required_size(j, "num_hidden_layers", kMaxNumLayers, label, "pagoda's limit; Llama 3.1 405B has 126");
    c.num_heads = required_size(j, "num_attention_heads", kMaxNumHeads, label, "pagoda's limit");
    c.num_kv_heads = int(json_int_in(j, "num_key_value_heads", c.num_heads, 1, c.num_heads, label,
                                     "at least 1 and at most num_attention_heads"));
    if (c.num_heads % c.num_kv_heads != 0)
      throw_config_error(label, ": num_attention_heads ", c.num_heads, " is not a multiple of num_key_value_heads ", c.num_kv_heads);
    c.head_dim = int(json_int_in(j, "head_dim", 0, 0, kMaxHeadDim, label, "pagoda's limit"));
    if (c.head_dim == 0) {
      if (c.hidden_size % c.num_heads != 0)
        throw_config_error(label, ": no head_dim and hidden_size ", c.hidden_size, " is not a multiple of num_attention_heads ",
                           c.num_heads, "; fix the sizes or give head_dim");
      c.head_dim = c.hidden_size / c.num_heads;
    }
    if (c.head_dim % 2 != 0) throw_config_error(label, ": head_dim must be positive and even (RoPE), got ", c.head_dim);
    c.max_position_embeddings = int(json_int_in(j, "max_position_embeddings", 2048, 1, kMaxPositionEmbeddings, label,
                                                "pagoda's limit"));
    c.rms_norm_eps = json_number(j, "rms_norm_eps", 1e-6, label);
    if (c.rms_norm_eps <= 0) throw_config_error(label, ": rms_norm_eps must be positive");
    c.tie_word_embeddings = json_bool(j, "tie_word_embeddings", false, label);
    if (auto act = j.find("hidden_act"); act != j.end() && !act->is_null()) {
      if (!act->is_string() || (act->get<std::string>() != "silu" && act->get<std::string>() != "swish"))
        throw_config_error(label, ": hidden_act ", json_preview(*act), " is not supported (only silu)");
    }
    if (json_bool(j, "mlp_bias", false, label)) throw_config_error(label, ": mlp_bias is not supported");
    parse_rope(j, label, c);
    for (const char* k : {"dtype", "torch_dtype"}) {
      auto d = j.find(k);
      if (d == j.end() || d->is_null()) continue;
      if (!d->is_string()) throw_config_error(label, ": '", k, "' must be a string, got ", json_preview(*d));
      auto t = dtype_from_name(d->get<std::string>());
      if (!t || (*t != DType::kF32 && *t != DType::kBF16 && *t != DType::kF16))
        throw_config_error(label, ": ", k, " '", text_preview(d->get<std::string>()), "' is not supported (float32, bfloat16, float16)");
      c.checkpoint_dtype = *t;
      break;
    }
    parse_quantization(j, label, c);
    c.layer_uses_sliding_window.assign(size_t(c.num_layers), false);
    spec->parse_quirks(j, label, c);
    c.bos_token_id = optional_token_id(j, "bos_token_id", -1, c.vocab_size, label);
    if (j.contains("eos_token_id")) c.eos_token_ids = token_id_list(j["eos_token_id"], "eos_token_id", c.vocab_size, label);
    check_pad_token_id(j, label);

    if (!gen_text.empty()) {
      check_json_depth(gen_text, gen_label);
      json g = json::parse(gen_text, nullptr, false);
      if (g.is_discarded() || !g.is_object()) throw_config_error(gen_label, ": not a JSON object");
      c.bos_token_id = optional_token_id(g, "bos_token_id", c.bos_token_id, c.vocab_size, gen_label);
      if (g.contains("eos_token_id") && !g["eos_token_id"].is_null())
        c.eos_token_ids = token_id_list(g["eos_token_id"], "eos_token_id", c.vocab_size, gen_label);
      check_pad_token_id(g, gen_label);
    }
  } catch (const json::exception& e) {
    throw_config_error(label, ": malformed: ", text_preview(e.what(), 200));
  }
  return c;
}

ModelConfig parse_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path cfg_path = path, gen_path;
  if (fs::is_directory(path, ec)) {
    cfg_path = fs::path(path) / "config.json";
    gen_path = fs::path(path) / "generation_config.json";
  } else {
    gen_path = fs::path(path).parent_path() / "generation_config.json";
  }
  if (!fs::exists(path, ec)) throw_runtime_error("model path '", path, "' does not exist");
  if (!fs::exists(cfg_path, ec))
    throw_runtime_error("'", cfg_path.string(), "' does not exist: '", path, "' is not a Hugging Face model folder");
  const std::string gen = fs::exists(gen_path, ec) ? read_user_file(gen_path.string(), kMaxConfigFileBytes) : std::string();
  return parse_model_config_text(read_user_file(cfg_path.string(), kMaxConfigFileBytes), cfg_path.string(), gen,
                                 gen_path.string());
}

std::string model_config_summary(const ModelConfig& c) {
  std::string s = str_cat(c.architecture_name, ": ", c.num_layers, " layers, hidden ", c.hidden_size, ", heads ", c.num_heads, "/",
                          c.num_kv_heads, " x ", c.head_dim, ", ffn ", c.intermediate_size, ", vocab ", c.vocab_size,
                          ", rope ", c.rope_scaling.type, " theta ", c.rope_theta);
  if (!c.rope_scaling.freq_factors.empty()) s += " with per-frequency factors";
  if (c.tie_word_embeddings) s += ", tied embeddings";
  if (c.attention_bias) s += c.o_proj_bias ? ", qkvo bias" : ", qkv bias";
  if (c.qk_norm) s += ", q/k norm";
  if (c.sliding_window > 0) s += str_cat(", sliding window ", c.sliding_window);
  return s;
}

}  // namespace pagoda
