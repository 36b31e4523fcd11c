// The GGUF vocabulary as the tokenizer.json and tokenizer_config.json Hugging Face would hold for the same
// model, built in memory and loaded by the same code as the files, so a GGUF model and its Hugging Face
// original encode alike.
#include "pagoda/tokenizer/gguf_vocab.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include "pagoda/core/logging.h"
#include "pagoda/tokenizer/tokenizer_impl.h"
#include "pagoda/tokenizer/unicode.h"

namespace pagoda {

using namespace tokenizer_detail;

namespace {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type; 0 is "undefined").
constexpr int32_t kTypeUndefined = 0;
constexpr int32_t kTypeUnknown = 2;
constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeUserDefined = 4;
constexpr int32_t kTypeByte = 6;

// The pre-tokenizer regexes of the Hugging Face tokenizer.json files of these families. llama.cpp splits
// with the same patterns (the llama3 and qwen2 ones with the contractions spelled '[sS] instead of (?i:)).
constexpr std::string_view kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// How llama.cpp splits text for each tokenizer.ggml.pre name pagoda knows.
enum class PreFamily {
  kDefault,      // llama.cpp's fallback: punctuation runs, GPT-2, number runs, then groups of three digits
  kLlama3,       // Llama 3 regex; ignore_merges; BOS by default
  kLlama3Regex,  // the Llama 3 regex alone (DBRX, Smaug)
  kGpt2,         // GPT-2 regex
  kQwen2,        // Qwen2 regex (single digits)
  kDigitsGpt2,   // every digit alone, then GPT-2 regex (StarCoder, SmolLM)
};

struct PreName {
  std::string_view name;
  PreFamily family;
};

constexpr PreName kPreNames[] = {
    {"default", PreFamily::kDefault},     {"llama3", PreFamily::kLlama3},
    {"llama-v3", PreFamily::kLlama3},     {"llama-bpe", PreFamily::kLlama3},
    {"falcon3", PreFamily::kLlama3},      {"dbrx", PreFamily::kLlama3Regex},
    {"smaug-bpe", PreFamily::kLlama3Regex}, {"gpt-2", PreFamily::kGpt2},
    {"phi-2", PreFamily::kGpt2},          {"mpt", PreFamily::kGpt2},
    {"olmo", PreFamily::kGpt2},           {"qwen2", PreFamily::kQwen2},
    {"deepseek-r1-qwen", PreFamily::kQwen2}, {"smollm", PreFamily::kDigitsGpt2},
    {"starcoder", PreFamily::kDigitsGpt2}, {"refact", PreFamily::kDigitsGpt2},
    {"codeshell", PreFamily::kDigitsGpt2},
};

Json split_isolated(std::string_view regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

Json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

Json sequence(std::vector<Json> steps) {
  Json list = Json::array();
  for (Json& s : steps) list.push_back(std::move(s));
  return {{"type", "Sequence"}, {"pretokenizers", std::move(list)}};
}

// The byte-level BPE part of tokenizer.json that a pre-tokenizer family implies.
struct BpeSetup {
  Json normalizer;  // null: none
  Json pre_tokenizer;
  bool ignore_merges = false;
  bool add_bos = false;  // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};

BpeSetup bpe_setup(PreFamily family) {
  BpeSetup s;
  switch (family) {
    case PreFamily::kDefault:
      s.pre_tokenizer = sequence({split_isolated(R"([\p{P}\$\+<=>\^~\|]+)"), split_isolated(kGpt2Pattern),
                                  split_isolated(R"(\p{N}+)"), split_isolated("[0-9][0-9][0-9]"), byte_level(false)});
      break;
    case PreFamily::kLlama3:
      s.pre_tokenizer = sequence({split_isolated(kLlama3Pattern), byte_level(false)});
      s.ignore_merges = true;
      s.add_bos = true;
      break;
    case PreFamily::kLlama3Regex:
      s.pre_tokenizer = sequence({split_isolated(kLlama3Pattern), byte_level(false)});
      break;
    case PreFamily::kGpt2:
      s.pre_tokenizer = byte_level(true);
      break;
    case PreFamily::kQwen2:
      s.normalizer = {{"type", "NFC"}};
      s.pre_tokenizer = sequence({split_isolated(kQwen2Pattern), byte_level(false)});
      break;
    case PreFamily::kDigitsGpt2:
      s.pre_tokenizer = sequence({{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)});
      break;
  }
  return s;
}

// "<0xNN>" -> NN, else -1.
int byte_token_value(std::string_view t) {
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Control tokens llama.cpp ends generation at, found by their text (llama-vocab.cpp's EOG list, for the
// families pagoda reads).
constexpr std::string_view kEndOfGenerationTexts[] = {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>",
                                                      "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>"};

// Everything a tokenizer is built from, checked: the per-token arrays agree, ids are in range, tokens are
// unique, byte tokens are named <0xNN>.
class Checked {
 public:
  explicit Checked(const GgufVocab& v) : v_(v), where_(v.label.empty() ? std::string("GGUF file") : v.label) {}

  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw_config_error(where_, ": ", key, ": ", what);
  }

  int32_t type(size_t id) const {
    const int32_t t = v_.token_types.empty() ? 1 : v_.token_types[id];
    return t == kTypeUndefined ? 1 : t;
  }

  // The token -> id map; fails on duplicates.
  std::unordered_map<std::string_view, int> check_tokens() const {
    const size_t n = v_.tokens.size();
    if (n == 0) fail("tokenizer.ggml.tokens", "the token list is empty");
    if (n > static_cast<size_t>(kMaxTokenId) + 1)
      fail("tokenizer.ggml.tokens", str_cat(n, " tokens; pagoda reads at most ", kMaxTokenId + 1));
    if (!v_.token_types.empty() && v_.token_types.size() != n)
      fail("tokenizer.ggml.token_type", str_cat(v_.token_types.size(), " entries for ", n, " tokens"));
    if (!v_.scores.empty() && v_.scores.size() != n)
      fail("tokenizer.ggml.scores", str_cat(v_.scores.size(), " entries for ", n, " tokens"));
    std::unordered_map<std::string_view, int> ids;
    ids.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int32_t t = type(i);
      if (t < 1 || t > kTypeByte)
        fail("tokenizer.ggml.token_type", str_cat("token ", i, " has type ", t, " (expected 0..6)"));
      if (t == kTypeByte && byte_token_value(v_.tokens[i]) < 0)
        fail("tokenizer.ggml.tokens", str_cat("token ", i, " '", text_preview(v_.tokens[i]),
                                              "' has the byte type (6) but is not named <0xNN>"));
      if (!v_.scores.empty() && std::isnan(v_.scores[i]))
        fail("tokenizer.ggml.scores", str_cat("the score of token ", i, " is NaN"));
      auto [it, fresh] = ids.emplace(v_.tokens[i], static_cast<int>(i));
      if (!fresh)
        fail("tokenizer.ggml.tokens", str_cat("tokens ", it->second, " and ", i, " are both '",
                                              text_preview(v_.tokens[i]), "'; a token must appear once"));
    }
    for (const auto& [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", v_.bos_id},
                                  {"tokenizer.ggml.eos_token_id", v_.eos_id},
                                  {"tokenizer.ggml.unknown_token_id", v_.unk_id},
                                  {"tokenizer.ggml.padding_token_id", v_.pad_id},
                                  {"tokenizer.ggml.eot_token_id", v_.eot_id}}) {
      if (id && (*id < 0 || static_cast<size_t>(*id) >= n))
        fail(key, str_cat("id ", *id, " is outside the ", n, " tokens (0..", n - 1, ")"));
    }
    return ids;
  }

  const std::string& where() const { return where_; }

 private:
  const GgufVocab& v_;
  std::string where_;
};

// tokenizer.ggml.merges -> the "merges" of tokenizer.json. llama.cpp splits each entry at its first space
// after the first byte; the string form "a b" is kept where it reads back the same, else the pair form.
Json gguf_merges(const GgufVocab& v, const Checked& c, const std::unordered_map<std::string_view, int>& ids) {
  if (v.merges.empty()) c.fail("tokenizer.ggml.merges", "missing or empty; a gpt2 (BPE) vocabulary needs its merges");
  Json out = Json::array();
  out.get_ref<Json::array_t&>().reserve(v.merges.size());
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos)
      c.fail("tokenizer.ggml.merges", str_cat("entry ", i, " '", text_preview(m), "' is not two tokens separated by a space"));
    const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    const std::string merged = str_cat(left, right);
    for (std::string_view t : {left, right, std::string_view(merged)}) {
      if (!ids.count(t))
        c.fail("tokenizer.ggml.merges", str_cat("entry ", i, " '", text_preview(m), "' needs the token '",
                                                text_preview(t), "', which is not in tokenizer.ggml.tokens"));
    }
    if (right.find(' ') == std::string_view::npos && left.find(' ') == std::string_view::npos) {
      out.push_back(m);
    } else {
      out.push_back(Json::array({std::string(left), std::string(right)}));
    }
  }
  return out;
}

Json added_token(const std::string& content, int id, bool special) {
  return {{"id", id},           {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},    {"normalized", false}, {"special", special}};
}

}  // namespace

std::string gpt2_pre_tokenizer_names() {
  std::string names;
  for (const PreName& p : kPreNames) names += str_cat(names.empty() ? "" : ", ", p.name);
  return names;
}

std::vector<std::pair<std::string, std::string>> sentencepiece_merges(const std::vector<std::string>& tokens,
                                                                       const std::vector<float>& scores) {
  PAGODA_CHECK(scores.size() == tokens.size(), scores.size(), " scores for ", tokens.size(), " tokens");
  std::unordered_map<std::string_view, int> ids;
  ids.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) ids.emplace(tokens[i], static_cast<int>(i));
  struct Candidate {
    float score;
    int left, right;
  };
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string_view t = tokens[i];
    // Split between characters (not bytes), as the pieces are characters.
    auto next = [&](size_t at) {
      char32_t cp;
      return at + utf8_decode(t, at, &cp);
    };
    for (size_t at = next(0); at < t.size(); at = next(at)) {
      auto l = ids.find(t.substr(0, at)), r = ids.find(t.substr(at));
      if (l != ids.end() && r != ids.end()) candidates.push_back({scores[i], l->second, r->second});
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.left != b.left ? a.left < b.left : a.right < b.right;
  });
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(candidates.size());
  for (const Candidate& c : candidates) merges.emplace_back(tokens[c.left], tokens[c.right]);
  return merges;
}

Tokenizer tokenizer_from_gguf_vocab(const GgufVocab& v) {
  const Checked c(v);
  const bool spm = v.model == "llama";
  if (!spm && v.model != "gpt2") {
    c.fail("tokenizer.ggml.model", str_cat("'", text_preview(v.model),
                                           "' is not supported; pagoda reads 'gpt2' (byte-level BPE) and 'llama' "
                                           "(SentencePiece) vocabularies"));
  }
  const std::unordered_map<std::string_view, int> ids = c.check_tokens();
  const int n = static_cast<int>(v.tokens.size());

  Json model = {{"type", "BPE"}, {"dropout", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}};
  Json vocab = Json::object();
  for (int i = 0; i < n; ++i) vocab[v.tokens[i]] = i;
  model["vocab"] = std::move(vocab);
  Json tj = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"post_processor", nullptr}};
  std::optional<int> bos = v.bos_id, eos = v.eos_id, unk = v.unk_id;
  bool add_bos = false;
  if (spm) {
    if (v.scores.empty())
      c.fail("tokenizer.ggml.scores", "missing; a llama (SentencePiece) vocabulary ranks its merges by these scores");
    // llama.cpp's defaults for SentencePiece files that do not name them (Llama 2's ids).
    if (!bos && n > 1) bos = 1;
    if (!eos && n > 2) eos = 2;
    if (!unk) unk = 0;
    add_bos = true;
    Json merges = Json::array();
    for (auto& [l, r] : sentencepiece_merges(v.tokens, v.scores)) merges.push_back(Json::array({std::move(l), std::move(r)}));
    model["merges"] = std::move(merges);
    bool byte_fallback = false;
    for (int i = 0; i < n; ++i) byte_fallback = byte_fallback || c.type(i) == kTypeByte;
    model["byte_fallback"] = byte_fallback;
    model["unk_token"] = v.tokens[*unk];
    model["fuse_unk"] = true;
    model["ignore_merges"] = false;
    const bool prefix = v.add_space_prefix.value_or(true);
    Json norm = Json::array();
    if (prefix) norm.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
    norm.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}});
    tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", std::move(norm)}};
    tj["pre_tokenizer"] = nullptr;
    Json dec = Json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                            {{"type", "ByteFallback"}},
                            {{"type", "Fuse"}}});
    if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    tj["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(dec)}};
  } else {
    std::string_view pre = v.pre;
    if (pre.empty()) {
      PAGODA_LOG_WARNING(c.where(), ": tokenizer.ggml.pre is missing; splitting text as llama.cpp's 'default' "
                         "pre-tokenizer does, which may not be how the model was trained");
      pre = "default";
    }
    const auto name = std::find_if(std::begin(kPreNames), std::end(kPreNames), [&](const PreName& p) { return p.name == pre; });
    if (name == std::end(kPreNames)) {
      c.fail("tokenizer.ggml.pre", str_cat("pre-tokenizer '", text_preview(pre), "' is not supported (supported: ",
                                           gpt2_pre_tokenizer_names(), "); pass a Hugging Face tokenizer with --tokenizer"));
    }
    BpeSetup setup = bpe_setup(name->family);
    model["merges"] = gguf_merges(v, c, ids);
    model["byte_fallback"] = false;
    model["unk_token"] = nullptr;
    model["fuse_unk"] = false;
    model["ignore_merges"] = setup.ignore_merges;
    tj["normalizer"] = std::move(setup.normalizer);
    tj["pre_tokenizer"] = std::move(setup.pre_tokenizer);
    tj["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    add_bos = setup.add_bos;
  }
  tj["model"] = std::move(model);

  Json added = Json::array();
  std::vector<int> eog;
  for (int i = 0; i < n; ++i) {
    const int32_t t = c.type(i);
    if (t == kTypeUnknown || t == kTypeControl || t == kTypeUserDefined) {
      added.push_back(added_token(v.tokens[i], i, t != kTypeUserDefined));
    }
    if (t == kTypeControl && std::find(std::begin(kEndOfGenerationTexts), std::end(kEndOfGenerationTexts),
                                       v.tokens[i]) != std::end(kEndOfGenerationTexts)) {
      eog.push_back(i);
    }
  }
  tj["added_tokens"] = std::move(added);

  add_bos = v.add_bos.value_or(add_bos);
  const bool add_eos = v.add_eos.value_or(false);
  if (v.add_bos.value_or(false) && !bos)
    c.fail("tokenizer.ggml.add_bos_token", "is true but the file names no BOS token (tokenizer.ggml.bos_token_id)");
  if (add_eos && !eos)
    c.fail("tokenizer.ggml.add_eos_token", "is true but the file names no EOS token (tokenizer.ggml.eos_token_id)");

  // tokenizer_config.json: the named tokens, what encode() adds, the chat template.
  Json config = {{"add_bos_token", add_bos && bos.has_value()}, {"add_eos_token", add_eos}};
  if (bos) config["bos_token"] = v.tokens[*bos];
  if (eos) config["eos_token"] = v.tokens[*eos];
  if (unk) config["unk_token"] = v.tokens[*unk];
  if (v.pad_id) config["pad_token"] = v.tokens[*v.pad_id];
  if (!v.chat_template.empty()) config["chat_template"] = v.chat_template;

  // generation_config.json's eos_token_id: the ids after the EOS token that also end generation.
  Json stop = Json::array();
  if (v.eot_id) stop.push_back(*v.eot_id);
  for (int id : eog) stop.push_back(id);

  TokenizerJson json{.tokenizer = std::move(tj), .config = std::move(config), .special_tokens_map = nullptr,
                     .generation_config = {{"eos_token_id", std::move(stop)}}};
  TokenizerSources labels;
  labels.tokenizer_json_label = c.where() + " (tokenizer.ggml.*)";
  labels.config_label = labels.tokenizer_json_label;
  labels.generation_config_label = labels.tokenizer_json_label;
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->load(json, labels);
  return Tokenizer(std::move(impl));
}

}  // namespace pagoda
