#include "pagoda/tokenizer/wordpiece.h"

#include <utf8proc.h>

#include <algorithm>

#include "pagoda/core/json_checks.h"
#include "pagoda/tokenizer/unicode.h"

namespace pagoda::tokenizer_detail {

namespace {

utf8proc_category_t category(char32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }

// Hugging Face's BERT helpers (tokenizers/src/normalizers/bert.rs, pre_tokenizers/bert.rs).
bool bert_whitespace(char32_t cp) { return cp == '\t' || cp == '\n' || cp == '\r' || is_whitespace(cp); }

bool bert_control(char32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CS:
      return true;
    default:
      return false;
  }
}

bool bert_chinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool bert_punctuation(char32_t cp) {
  if (cp < 128) return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

// Rust's char::to_lowercase; utf8proc gives the simple mapping, and U+0130 is the one code point whose
// full lowercase is two code points.
void append_lower(char32_t cp, std::string* out) {
  if (cp == 0x130) {
    out->append("i\xCC\x87");
    return;
  }
  utf8_append(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), out);
}

template <typename F>
void for_each_cp(std::string_view s, F&& f) {
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    i += utf8_decode(s, i, &cp);
    f(cp);
  }
}

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip, bool lower)
      : clean_(clean), chinese_(chinese), strip_(strip), lower_(lower) {}

  std::string normalize(std::string_view text) const override {
    std::string s;
    s.reserve(text.size() + 8);
    for_each_cp(text, [&](char32_t cp) {
      if (clean_) {
        if (cp == 0 || cp == 0xFFFD || bert_control(cp)) return;
        if (bert_whitespace(cp)) cp = ' ';
      }
      if (chinese_ && bert_chinese(cp)) {
        s.push_back(' ');
        utf8_append(cp, &s);
        s.push_back(' ');
        return;
      }
      utf8_append(cp, &s);
    });
    if (strip_) {
      const std::string nfd = unicode_normalize(s, NormalForm::kNfd);
      s.clear();
      for_each_cp(nfd, [&](char32_t cp) {
        if (category(cp) != UTF8PROC_CATEGORY_MN) utf8_append(cp, &s);
      });
    }
    if (lower_) {
      std::string low;
      low.reserve(s.size());
      for_each_cp(s, [&](char32_t cp) { append_lower(cp, &low); });
      s = std::move(low);
    }
    return s;
  }

 private:
  bool clean_, chinese_, strip_, lower_;
};

class BertPreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    for (const Piece& p : *pieces) {
      std::string word;
      bool first = p.at_start;
      auto flush = [&] {
        if (!word.empty()) out.push_back({std::move(word), first});
        word.clear();
        first = false;
      };
      for_each_cp(p.text, [&](char32_t cp) {
        if (is_whitespace(cp)) {
          flush();
        } else if (bert_punctuation(cp)) {
          flush();
          utf8_append(cp, &word);
          flush();
        } else {
          utf8_append(cp, &word);
        }
      });
      flush();
    }
    *pieces = std::move(out);
  }
};

class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>* tokens, InvalidBytes) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      if (i != 0) {
        if (t.starts_with(prefix_)) {
          t.erase(0, prefix_.size());
        } else {
          t.insert(0, " ");
        }
      }
      if (cleanup_) t = cleanup(t);
    }
  }

 private:
  // tokenizers' decoders::wordpiece::cleanup.
  static std::string cleanup(std::string s) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},           {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
        {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) {
      const std::string_view f(from);
      std::string r;
      for (size_t pos = 0;;) {
        const size_t hit = s.find(f, pos);
        if (hit == std::string::npos) {
          r.append(s, pos, std::string::npos);
          break;
        }
        r.append(s, pos, hit - pos).append(to);
        pos = hit + f.size();
      }
      s = std::move(r);
    }
    return s;
  }
  std::string prefix_;
  bool cleanup_;
};

}  // namespace

WordPieceModel::WordPieceModel(const Json& model, const std::string& where) {
  const std::string here = where + ": model (WordPiece)";
  read_vocab(model, here, &vocab_, &tokens_, &has_token_);
  prefix_ = json_string_or(model, "continuing_subword_prefix", "##", here);
  const std::string unk = json_string_or(model, "unk_token", "[UNK]", here);
  auto it = vocab_.find(unk);
  if (it == vocab_.end()) throw_config_error(here, ": unk_token '", text_preview(unk), "' is not in the vocabulary");
  unk_id_ = it->second;
  if (model.contains("max_input_chars_per_word")) {
    const std::optional<int64_t> n = json_integral(model["max_input_chars_per_word"]);
    if (!n || *n <= 0) throw_config_error(here, ": 'max_input_chars_per_word' must be a positive integer");
    max_chars_ = static_cast<size_t>(*n);
  }
}

void WordPieceModel::encode(std::string_view word, std::vector<int>* ids) const {
  // Code point boundaries: matches are tried on whole characters only.
  std::vector<size_t> bounds;
  for (size_t i = 0; i < word.size();) {
    bounds.push_back(i);
    char32_t cp;
    i += utf8_decode(word, i, &cp);
  }
  bounds.push_back(word.size());
  const size_t n_chars = bounds.size() - 1;
  if (n_chars == 0) return;
  if (n_chars > max_chars_) {
    ids->push_back(unk_id_);
    return;
  }
  const size_t mark = ids->size();
  std::string key;
  for (size_t start = 0; start < n_chars;) {
    int found = -1;
    size_t end = n_chars;
    for (; end > start; --end) {
      key.clear();
      if (start > 0) key = prefix_;
      key.append(word.substr(bounds[start], bounds[end] - bounds[start]));
      auto it = vocab_.find(key);
      if (it != vocab_.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {
      ids->resize(mark);
      ids->push_back(unk_id_);
      return;
    }
    ids->push_back(found);
    start = end;
  }
}

std::optional<int> WordPieceModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* WordPieceModel::id_to_token(int id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

std::unique_ptr<Normalizer> make_bert_normalizer(const Json& spec, const std::string& where) {
  const bool lower = json_bool_or(spec, "lowercase", true, where);
  bool strip = lower;  // strip_accents: null follows lowercase
  if (spec.contains("strip_accents") && !spec["strip_accents"].is_null()) strip = json_bool_or(spec, "strip_accents", lower, where);
  return std::make_unique<BertNormalizer>(json_bool_or(spec, "clean_text", true, where),
                                          json_bool_or(spec, "handle_chinese_chars", true, where), strip, lower);
}

std::unique_ptr<PreTokenizer> make_bert_pre_tokenizer() { return std::make_unique<BertPreTokenizer>(); }

std::unique_ptr<Decoder> make_wordpiece_decoder(const Json& spec, const std::string& where) {
  return std::make_unique<WordPieceDecoder>(json_string_or(spec, "prefix", "##", where),
                                            json_bool_or(spec, "cleanup", true, where));
}

}  // namespace pagoda::tokenizer_detail
