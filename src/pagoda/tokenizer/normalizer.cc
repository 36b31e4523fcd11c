#include "pagoda/tokenizer/normalizer.h"

#include <optional>
#include <vector>

#include "pagoda/tokenizer/regex.h"
#include "pagoda/tokenizer/unicode.h"
#include "pagoda/tokenizer/wordpiece.h"

namespace pagoda::tokenizer_detail {

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  std::string normalize(std::string_view text) const override { return unicode_normalize(text, form_); }

 private:
  NormalForm form_;
};

// Prepends a string to non-empty text (Llama 2's "▁" dummy prefix).
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};
    std::string out = prefix_;
    out.append(text);
    return out;
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(const PatternSpec& pattern, std::string content, const std::string& where)
      : literal_(pattern.literal), content_(std::move(content)) {
    if (pattern.is_regex) regex_.emplace(pattern.regex, where);
  }
  std::string normalize(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    if (regex_) {
      for (const auto& [b, e] : regex_->find_all(text)) {
        if (e == b) continue;
        out.append(text.substr(pos, b - pos)).append(content_);
        pos = e;
      }
    } else {
      for (size_t b = text.find(literal_); b != std::string_view::npos; b = text.find(literal_, pos)) {
        out.append(text.substr(pos, b - pos)).append(content_);
        pos = b + literal_.size();
      }
    }
    out.append(text.substr(pos));
    return out;
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& step : steps_) s = step->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

PatternSpec parse_pattern(const Json& spec, const std::string& where) {
  PatternSpec p;
  if (spec.is_object() && spec.contains("Regex")) {
    p.regex = json_string(spec, "Regex", where + ": pattern");
    p.is_regex = true;
  } else if (spec.is_object() && spec.contains("String")) {
    p.literal = json_string(spec, "String", where + ": pattern");
    if (p.literal.empty()) throw_config_error(where, ": the pattern string is empty");
  } else {
    throw_config_error(where, ": pattern must be {\"String\": ...} or {\"Regex\": ...}, found ", json_preview(spec));
  }
  return p;
}

std::unique_ptr<Normalizer> parse_normalizer(const Json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_type(spec, where);
  const std::string here = where + " (" + text_preview(type) + ")";
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkd);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(json_string(spec, "prepend", here));
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(parse_pattern(json_field(spec, "pattern", here), here),
                                               json_string(spec, "content", here), here);
  }
  if (type == "BertNormalizer") return make_bert_normalizer(spec, here);
  if (type == "Sequence") {
    const Json& list = json_field(spec, "normalizers", here);
    if (!list.is_array()) throw_config_error(here, ": 'normalizers' must be a list");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const Json& s : list) {
      if (auto n = parse_normalizer(s, where)) steps.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  throw_config_error(where, ": normalizer type '", text_preview(type),
                     "' is not supported (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, BertNormalizer, Sequence)");
}

}  // namespace pagoda::tokenizer_detail
