#include "pagoda/tokenizer/decoder.h"

#include <algorithm>
#include <optional>

#include "pagoda/tokenizer/normalizer.h"
#include "pagoda/tokenizer/regex.h"
#include "pagoda/tokenizer/unicode.h"
#include "pagoda/tokenizer/wordpiece.h"

namespace pagoda::tokenizer_detail {

namespace {

// One code point of a JSON string field that must hold exactly one character.
char32_t single_char(const Json& spec, std::string_view key, std::string_view fallback, const std::string& where) {
  const std::string s = json_string_or(spec, key, fallback, where);
  char32_t cp = 0;
  if (s.empty() || !utf8_is_valid(s) || utf8_decode(s, 0, &cp) != s.size()) {
    throw_config_error(where, ": '", key, "' must be exactly one character, found '", text_preview(s), "'");
  }
  return cp;
}

// Maps each byte-level character back to its byte; a token with a character outside the alphabet (an
// added token such as "<think>\n") is taken as its own UTF-8 bytes. Invalid UTF-8 becomes U+FFFD.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens, InvalidBytes invalid) const override {
    const ByteLevelAlphabet& alphabet = byte_level_alphabet();
    std::string bytes;
    for (const std::string& t : *tokens) {
      const size_t mark = bytes.size();
      bool mapped = true;
      for (size_t i = 0; i < t.size() && mapped;) {
        char32_t cp;
        i += utf8_decode(t, i, &cp);
        const int b = cp < alphabet.char_to_byte.size() ? alphabet.char_to_byte[cp] : -1;
        if (b < 0) {
          mapped = false;
        } else {
          bytes.push_back(static_cast<char>(b));
        }
      }
      if (!mapped) {
        bytes.resize(mark);
        bytes.append(t);
      }
    }
    *tokens = {invalid == InvalidBytes::kReplace ? utf8_lossy(bytes) : std::move(bytes)};
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(const PatternSpec& pattern, std::string content, const std::string& where)
      : literal_(pattern.literal), content_(std::move(content)) {
    if (pattern.is_regex) regex_.emplace(pattern.regex, where);
  }
  void decode_chain(std::vector<std::string>* tokens, InvalidBytes invalid) const override {
    for (std::string& t : *tokens) {
      std::string out;
      size_t pos = 0;
      if (regex_) {
        for (const auto& [b, e] : regex_->find_all(t)) {
          if (e == b) continue;
          out.append(t, pos, b - pos).append(content_);
          pos = e;
        }
      } else {
        for (size_t b = t.find(literal_); b != std::string::npos; b = t.find(literal_, pos)) {
          out.append(t, pos, b - pos).append(content_);
          pos = b + literal_.size();
        }
      }
      if (pos == 0) continue;
      out.append(t, pos, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

// Runs of "<0xNN>" tokens become their bytes when those form valid UTF-8, else one U+FFFD per byte (the
// whole run, even its valid characters, as Hugging Face does).
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens, InvalidBytes invalid) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      if (invalid == InvalidBytes::kKeep || utf8_is_valid(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run.size(); ++i) out.emplace_back(kReplacementUtf8);
      }
      run.clear();
    };
    for (std::string& t : *tokens) {
      if (auto b = byte_token_value(t)) {
        run.push_back(static_cast<char>(*b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    *tokens = std::move(out);
  }

 private:
  static std::optional<int> byte_token_value(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
    int v = 0;
    for (int i = 3; i < 5; ++i) {
      const char c = t[i];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return std::nullopt;
      v = v * 16 + d;
    }
    return v;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens, InvalidBytes invalid) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    *tokens = {std::move(all)};
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from every token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : stop_(stop), start_(start) {
    utf8_append(content, &content_);
  }
  void decode_chain(std::vector<std::string>* tokens, InvalidBytes invalid) const override {
    const size_t w = content_.size();
    for (std::string& t : *tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && b + w <= e && t.compare(b, w, content_) == 0; ++k) b += w;
      for (size_t k = 0; k < stop_ && e >= b + w && t.compare(e - w, w, content_) == 0; ++k) e -= w;
      if (b != 0 || e != t.size()) t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  size_t stop_, start_;
};

// SentencePiece: the replacement character becomes a space, except in the first token where (unless the
// prepend scheme is "never") it is dropped, undoing the prepended "▁".
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool strip_first) : strip_first_(strip_first) {
    utf8_append(replacement, &replacement_);
  }
  void decode_chain(std::vector<std::string>* tokens, InvalidBytes invalid) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      const std::string_view with = i == 0 && strip_first_ ? std::string_view() : std::string_view(" ");
      std::string out;
      size_t pos = 0;
      for (size_t b = t.find(replacement_); b != std::string::npos; b = t.find(replacement_, pos)) {
        out.append(t, pos, b - pos).append(with);
        pos = b + replacement_.size();
      }
      if (pos == 0) continue;
      out.append(t, pos, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>* tokens, InvalidBytes invalid) const override {
    for (const auto& s : steps_) s->decode_chain(tokens, invalid);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

size_t json_count(const Json& spec, std::string_view key, const std::string& where) {
  const Json& v = json_field(spec, key, where);
  const std::optional<int64_t> n = json_integral(v);
  if (!n || *n < 0) throw_config_error(where, ": '", key, "' must be a non-negative integer, got ", json_preview(v));
  return static_cast<size_t>(std::min<int64_t>(*n, 1 << 20));
}

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const Json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_type(spec, where);
  const std::string here = where + " (" + text_preview(type) + ")";
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(parse_pattern(json_field(spec, "pattern", here), here),
                                            json_string(spec, "content", here), here);
  }
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(single_char(spec, "content", " ", here), json_count(spec, "start", here),
                                          json_count(spec, "stop", here));
  }
  if (type == "Metaspace") {
    bool strip_first = json_bool_or(spec, "add_prefix_space", true, here);
    if (spec.contains("prepend_scheme")) strip_first = json_string(spec, "prepend_scheme", here) != "never";
    return std::make_unique<MetaspaceDecoder>(single_char(spec, "replacement", "\xE2\x96\x81", here), strip_first);
  }
  if (type == "WordPiece") return make_wordpiece_decoder(spec, here);
  if (type == "Sequence") {
    const Json& list = json_field(spec, "decoders", here);
    if (!list.is_array()) throw_config_error(here, ": 'decoders' must be a list");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const Json& s : list) {
      if (auto d = parse_decoder(s, where)) steps.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  throw_config_error(where, ": decoder type '", text_preview(type),
                     "' is not supported (supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, "
                     "WordPiece, Sequence)");
}

}  // namespace pagoda::tokenizer_detail
