// Builds a Tokenizer from tokenizer.json and the optional files beside it (tokenizer_config.json,
// special_tokens_map.json, generation_config.json, chat_template.jinja).
#include <algorithm>

#include "pagoda/core/json_checks.h"
#include "pagoda/core/json_depth.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/read_file.h"
#include "pagoda/tokenizer/tokenizer_impl.h"
#include "pagoda/tokenizer/wordpiece.h"

namespace pagoda {

using namespace tokenizer_detail;

namespace {

namespace fs = std::filesystem;

// Depth-checks, then parses; the JSON type is what tokenizer.json and its companions need (the
// walkers below recurse once per nesting level, which check_json_depth bounds).
Json parse_json_text(const std::string& text, const std::string& where) {
  check_json_depth(text, where);
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw_config_error("tokenizer: '", where, "' is not valid JSON (", text_preview(e.what(), 200), ")");
  }
}

// An optional file's text: nullopt when absent.
std::optional<std::string> read_optional(const fs::path& path, uint64_t max_bytes) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  return read_user_file(path.string(), max_bytes);
}

// A special token in tokenizer_config.json / special_tokens_map.json: "text" or {"content": "text", ...}.
std::optional<std::string> token_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// The value of `key` in the config, else in special_tokens_map.json.
std::optional<std::string> named_token(const Json& config, const Json& token_map, const char* key) {
  for (const Json* j : {&config, &token_map}) {
    if (j->is_object() && j->contains(key)) {
      if (auto t = token_text((*j)[key])) return t;
    }
  }
  return std::nullopt;
}

AddedToken parse_added_token(const Json& t, int id, const std::string& where) {
  AddedToken a;
  a.id = id;
  a.content = json_string(t, "content", where);
  a.special = json_bool_or(t, "special", false, where);
  a.lstrip = json_bool_or(t, "lstrip", false, where);
  a.rstrip = json_bool_or(t, "rstrip", false, where);
  a.normalized = json_bool_or(t, "normalized", !a.special, where);
  a.single_word = json_bool_or(t, "single_word", false, where);
  return a;
}

int checked_id(long long id, const std::string& where) {
  if (id < 0 || id > kMaxTokenId)
    throw_config_error(where, ": token id ", id, " is outside 0..", kMaxTokenId, "; fix the id in the file");
  return static_cast<int>(id);
}

struct SpecialAffixes {
  std::vector<int> prefix, suffix;
};

// The ids a post-processor puts around a single sequence.
SpecialAffixes parse_post_processor(const Json& spec, const std::string& where) {
  SpecialAffixes out;
  if (spec.is_null()) return out;
  const std::string type = json_type(spec, where);
  const std::string here = where + " (" + text_preview(type) + ")";
  if (type == "ByteLevel") return out;  // only adjusts offsets
  if (type == "TemplateProcessing") {
    const Json& special = json_field(spec, "special_tokens", here);
    bool seen_sequence = false;
    const Json& single = json_field(spec, "single", here);
    if (!single.is_array()) throw_config_error(here, ": 'single' must be a list");
    for (const Json& piece : single) {
      if (piece.is_object() && piece.contains("Sequence")) {
        seen_sequence = true;
      } else if (piece.is_object() && piece.contains("SpecialToken")) {
        const std::string name = json_string(piece["SpecialToken"], "id", here);
        const Json& ids = json_field(json_field(special, name, here + ": special_tokens"), "ids", here);
        if (!ids.is_array()) throw_config_error(here, ": the ids of special token '", text_preview(name), "' must be a list");
        for (const Json& id : ids) {
          if (!id.is_number_integer())
            throw_config_error(here, ": special token '", text_preview(name), "' has a non-integer id: ", json_preview(id));
          (seen_sequence ? out.suffix : out.prefix).push_back(checked_id(id.get<long long>(), here));
        }
      } else {
        throw_config_error(here, ": unexpected template piece ", json_preview(piece));
      }
    }
    return out;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto id_of = [&](const char* key) {
      const Json& pair = json_field(spec, key, here);
      if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer()) {
        throw_config_error(here, ": '", key, "' must be [token, id]");
      }
      return checked_id(pair[1].get<long long>(), here);
    };
    out.prefix = {id_of("cls")};
    out.suffix = {id_of("sep")};
    return out;
  }
  if (type == "Sequence") {
    const Json& list = json_field(spec, "processors", here);
    if (!list.is_array()) throw_config_error(here, ": 'processors' must be a list");
    for (const Json& p : list) {
      SpecialAffixes inner = parse_post_processor(p, where);
      out.prefix.insert(out.prefix.begin(), inner.prefix.begin(), inner.prefix.end());
      out.suffix.insert(out.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return out;
  }
  throw_config_error(where, ": post_processor type '", text_preview(type),
                     "' is not supported (supported: TemplateProcessing, ByteLevel, BertProcessing, "
                     "RobertaProcessing, Sequence)");
}

// `jinja`: the text of chat_template.jinja beside the config, when there is one.
std::string read_chat_template(const Json& config, const std::optional<std::string>& jinja, const std::string& where) {
  // transformers prefers chat_template.jinja over the config's string when both exist.
  if (jinja) return *jinja;
  if (!config.is_object() || !config.contains("chat_template")) return {};
  const Json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    // Named templates: [{"name": "default", "template": "..."}, {"name": "tool_use", ...}].
    const Json* chosen = nullptr;
    for (const Json& e : t) {
      if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) {
        throw_config_error(where, ": chat_template entries must be {\"name\": ..., \"template\": ...}, found ",
                           json_preview(e));
      }
      if (chosen == nullptr || (e.contains("name") && e["name"] == "default")) chosen = &e;
    }
    return chosen ? (*chosen)["template"].get<std::string>() : std::string();
  }
  if (t.is_null()) return {};
  throw_config_error(where, ": chat_template must be a string or a list of named templates, got ", json_preview(t));
}

}  // namespace

void Tokenizer::Impl::build(const TokenizerJson& json, const TokenizerSources& src) {
  const std::string& where = src.tokenizer_json_label;
  const Json& tj = json.tokenizer;
  if (!tj.is_object()) throw_config_error(where, ": expected a JSON object at the top level");

  const Json& model_json = json_field(tj, "model", where);
  std::string type = "BPE";  // older files omit the type; a BPE model is recognized by its merges
  if (model_json.is_object() && model_json.contains("type")) {
    type = json_string(model_json, "type", where + ": model");
  } else if (!model_json.is_object() || !model_json.contains("merges")) {
    type = "(unknown)";
  }
  if (type == "BPE") {
    model = std::make_unique<BpeModel>(model_json, where);
  } else if (type == "WordPiece") {
    model = std::make_unique<WordPieceModel>(model_json, where);
  } else {
    throw_config_error(where, ": model type '", text_preview(type),
                       "' is not supported; pagoda reads BPE tokenizers (GPT-2, Llama, Qwen, Mistral families) "
                       "and WordPiece ones (BERT family)");
  }
  auto component = [&](const char* key) { return tj.contains(key) ? tj[key] : Json(nullptr); };
  normalizer = parse_normalizer(component("normalizer"), where + ": normalizer");
  pre_tokenizer = parse_pre_tokenizer(component("pre_tokenizer"), where + ": pre_tokenizer");
  decoder = parse_decoder(component("decoder"), where + ": decoder");

  int max_id = model->max_id();
  auto add_token = [&](AddedToken t) {
    max_id = std::max(max_id, t.id);
    added.add(std::move(t));
  };
  const Json added_json = component("added_tokens");
  if (!added_json.is_null() && !added_json.is_array())
    throw_config_error(where, ": 'added_tokens' must be a list, got ", json_preview(added_json));
  for (const Json& t : added_json.is_array() ? added_json : Json::array()) {
    const Json& id = json_field(t, "id", where + ": added_tokens");
    if (!id.is_number_integer()) throw_config_error(where, ": added token id must be an integer, got ", json_preview(id));
    add_token(parse_added_token(t, checked_id(id.get<long long>(), where), where + ": added_tokens"));
  }

  const std::string& config_where = src.config_label;
  const Json& config = json.config;
  const Json& token_map = json.special_tokens_map;
  const Json& generation = json.generation_config;

  // Tokens the config adds that tokenizer.json lacks (transformers adds them on load).
  if (config.is_object() && config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
    for (const auto& [key, t] : config["added_tokens_decoder"].items()) {
      long long id = 0;
      if (!parse_int64(key, &id))
        throw_config_error(config_where, ": added_tokens_decoder key '", key, "' is not an id");
      if (added.find_by_id(checked_id(id, config_where)) == nullptr) {
        add_token(parse_added_token(t, static_cast<int>(id), config_where + ": added_tokens_decoder"));
      }
    }
  }

  // The tokens the config names are special; one that is only in the model vocabulary becomes an added
  // special token so that it is recognized in text, as transformers does.
  auto resolve = [&](const std::string& text) -> std::optional<int> {
    if (const AddedToken* a = added.find_by_content(text)) {
      added.set_special(a->id);
      return a->id;
    }
    if (auto id = model->token_to_id(text)) {
      add_token(AddedToken{.content = text, .id = *id, .special = true});
      return id;
    }
    PAGODA_LOG_WARNING("tokenizer: special token '", text, "' named in ", config_where, " is not in the vocabulary");
    return std::nullopt;
  };
  for (const char* key : {"unk_token", "pad_token", "cls_token", "sep_token", "mask_token"}) {
    if (auto t = named_token(config, token_map, key)) resolve(*t);
  }
  if (auto t = named_token(config, token_map, "bos_token")) {
    bos_token = *t;
    bos_id = resolve(*t);
  }
  if (auto t = named_token(config, token_map, "eos_token")) {
    eos_token = *t;
    if (auto id = resolve(*t)) eos_ids.push_back(*id);
  }
  for (const Json* j : {&config, &token_map}) {
    for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
      if (!j->is_object() || !j->contains(key)) continue;
      for (const auto& [name, v] : (*j)[key].items()) {
        if (auto t = token_text(v)) resolve(*t);
      }
    }
  }
  if (generation.is_object() && generation.contains("eos_token_id")) {
    const Json& e = generation["eos_token_id"];
    for (const Json& id : e.is_array() ? e : Json::array({e})) {
      if (id.is_null()) continue;
      const std::optional<int64_t> n = json_integral(id);
      if (!n) throw_config_error(src.generation_config_label, ": eos_token_id must be a token id, got ", json_preview(id));
      const int v = checked_id(*n, src.generation_config_label);
      if (std::find(eos_ids.begin(), eos_ids.end(), v) == eos_ids.end()) eos_ids.push_back(v);
    }
  }
  added.finalize([&](const std::string& s) { return normalizer ? normalizer->normalize(s) : s; });

  SpecialAffixes affixes = parse_post_processor(component("post_processor"), where + ": post_processor");
  prefix_ids = std::move(affixes.prefix);
  suffix_ids = std::move(affixes.suffix);
  for (const std::vector<int>* ids : {&prefix_ids, &suffix_ids}) {
    for (int id : *ids) {
      if (added.find_by_id(id) == nullptr && model->id_to_token(id) == nullptr) {
        throw_config_error(where, ": post_processor adds token id ", id, ", which is not in the vocabulary");
      }
    }
  }
  // tokenizer_config's add_bos_token / add_eos_token, when present, override the template (as
  // transformers' Llama tokenizers rebuild their post-processor from them).
  if (config.is_object()) {
    const std::optional<int> eos = eos_ids.empty() ? std::nullopt : std::optional<int>(eos_ids[0]);
    auto apply = [&](const char* key, const std::optional<int>& id, std::vector<int>* ids, bool front) {
      if (!config.contains(key) || !config[key].is_boolean() || !id) return;
      const bool want = config[key].get<bool>();
      const bool has = !ids->empty() && (front ? ids->front() : ids->back()) == *id;
      if (want && !has) ids->insert(front ? ids->begin() : ids->end(), *id);
      if (!want && has) ids->erase(front ? ids->begin() : ids->end() - 1);
    };
    apply("add_bos_token", bos_id, &prefix_ids, true);
    apply("add_eos_token", eos, &suffix_ids, false);
  }
  chat_template = read_chat_template(config, src.chat_template_jinja, config_where);
  vocab_size = max_id + 1;
}

void Tokenizer::Impl::load(const fs::path& tokenizer_json, const fs::path& tokenizer_config) {
  std::error_code ec;
  if (!fs::is_regular_file(tokenizer_json, ec)) {
    std::string hint = "give a Hugging Face tokenizer.json or the model folder that holds one";
    if (fs::exists(tokenizer_json.parent_path() / "tokenizer.model", ec)) {
      hint =
          "this folder has only a SentencePiece tokenizer.model; save it as tokenizer.json with transformers "
          "(AutoTokenizer.from_pretrained(...).save_pretrained(...))";
    }
    throw_runtime_error("tokenizer: '", tokenizer_json.string(), "' not found (", hint, ")");
  }
  const fs::path folder = tokenizer_config.parent_path();
  TokenizerSources src;
  src.tokenizer_json_label = tokenizer_json.string();
  src.tokenizer_json = read_user_file(src.tokenizer_json_label, kMaxTokenizerFileBytes);
  src.config_label = tokenizer_config.string();
  src.config = read_optional(tokenizer_config, kMaxConfigFileBytes);
  src.special_tokens_map_label = (folder / "special_tokens_map.json").string();
  src.special_tokens_map = read_optional(folder / "special_tokens_map.json", kMaxConfigFileBytes);
  src.generation_config_label = (folder / "generation_config.json").string();
  src.generation_config = read_optional(folder / "generation_config.json", kMaxConfigFileBytes);
  src.chat_template_jinja = read_optional(folder / "chat_template.jinja", kMaxConfigFileBytes);
  load(src);
}

void Tokenizer::Impl::load(const TokenizerSources& src) {
  TokenizerJson json;
  json.tokenizer = parse_json_text(src.tokenizer_json, src.tokenizer_json_label);
  if (src.config) json.config = parse_json_text(*src.config, src.config_label);
  if (src.special_tokens_map) json.special_tokens_map = parse_json_text(*src.special_tokens_map, src.special_tokens_map_label);
  if (src.generation_config) json.generation_config = parse_json_text(*src.generation_config, src.generation_config_label);
  load(json, src);
}

void Tokenizer::Impl::load(const TokenizerJson& json, const TokenizerSources& src) {
  source = src.tokenizer_json_label;
  try {
    build(json, src);
  } catch (const Json::exception& e) {
    // A field of an unexpected JSON type that the explicit checks did not catch.
    throw_config_error("tokenizer: '", source, "' (or a config file beside it) has an unexpected structure: ",
                       text_preview(e.what(), 200));
  }
  PAGODA_LOG_DEBUG("tokenizer: loaded ", source, " (", vocab_size, " tokens)");
}

}  // namespace pagoda
