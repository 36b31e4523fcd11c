#include "pagoda/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "pagoda/tokenizer/normalizer.h"
#include "pagoda/tokenizer/regex.h"
#include "pagoda/tokenizer/unicode.h"
#include "pagoda/tokenizer/wordpiece.h"

namespace pagoda::tokenizer_detail {

namespace {

using Range = std::pair<size_t, size_t>;

// What happens to the matched delimiters, as Hugging Face's SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin, end;
  bool is_match;
};

// Covers [0, len) with the matches and the gaps between them (empty text: one empty gap).
std::vector<Span> cover(size_t len, const std::vector<Range>& matches) {
  std::vector<Span> spans;
  if (len == 0) return {{0, 0, false}};
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev != len) spans.push_back({prev, len, false});
  return spans;
}

// Turns the covering spans into the byte ranges of the resulting pieces (empty ones dropped).
std::vector<Range> apply_behavior(std::vector<Span> spans, SplitBehavior behavior, bool invert) {
  if (invert) {
    for (auto& s : spans) s.is_match = !s.is_match;
  }
  std::vector<Span> out;  // is_match now means "remove"
  out.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      out = std::move(spans);
      break;
    case SplitBehavior::kIsolated:
      for (const auto& s : spans) out.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kContiguous:
      for (const auto& s : spans) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  std::vector<Range> ranges;
  ranges.reserve(out.size());
  for (const auto& s : out) {
    if (!s.is_match && s.begin != s.end) ranges.emplace_back(s.begin, s.end);
  }
  return ranges;
}

// Each character satisfying `pred` is its own match, as Hugging Face's char patterns.
std::vector<Range> char_matches(std::string_view text, const std::function<bool(char32_t)>& pred) {
  std::vector<Range> matches;
  size_t i = 0;
  while (i < text.size()) {
    char32_t cp;
    const size_t n = utf8_decode(text, i, &cp);
    if (pred(cp)) matches.emplace_back(i, i + n);
    i += n;
  }
  return matches;
}

// Replaces every piece by its sub-pieces, given by `ranges_of(text)`.
template <typename F>
void split_pieces(std::vector<Piece>* pieces, F&& ranges_of) {
  std::vector<Piece> out;
  out.reserve(pieces->size() * 2);
  for (Piece& p : *pieces) {
    const std::vector<Range> ranges = ranges_of(std::string_view(p.text));
    if (ranges.size() == 1 && ranges[0].first == 0 && ranges[0].second == p.text.size()) {
      out.push_back(std::move(p));
      continue;
    }
    for (const auto& [b, e] : ranges) out.push_back({p.text.substr(b, e - b), p.at_start && b == 0});
  }
  *pieces = std::move(out);
}

SplitBehavior parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  throw_config_error(where, ": unknown split behavior '", text_preview(name),
                     "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(const PatternSpec& pattern, SplitBehavior behavior, bool invert, const std::string& where)
      : literal_(pattern.literal), behavior_(behavior), invert_(invert) {
    if (pattern.is_regex) regex_.emplace(pattern.regex, where);
  }
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    split_pieces(pieces, [&](std::string_view text) {
      std::vector<Range> matches;
      if (regex_) {
        matches = regex_->find_all(text);
      } else {
        for (size_t b = text.find(literal_); b != std::string_view::npos;
             b = text.find(literal_, b + literal_.size())) {
          matches.emplace_back(b, b + literal_.size());
        }
      }
      return apply_behavior(cover(text.size(), matches), behavior_, invert_);
    });
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's byte-level pre-tokenizer: optional regex split, then every byte becomes one visible character.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : *pieces) {
        if (!p.text.empty() && p.text[0] != ' ') p.text = " " + p.text;
      }
    }
    if (use_regex_) {
      static const Regex gpt2("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
                              "the GPT-2 byte-level regex");
      split_pieces(pieces, [&](std::string_view text) {
        return apply_behavior(cover(text.size(), gpt2.find_all(text)), SplitBehavior::kIsolated, false);
      });
    }
    const ByteLevelAlphabet& alphabet = byte_level_alphabet();
    for (Piece& p : *pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char b : p.text) mapped.append(alphabet.byte_to_utf8[b]);
      p.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  bool use_regex_;
};

// SentencePiece's whitespace handling: spaces become the replacement character ("▁"), a "▁" is prepended
// per prepend_scheme, and optionally each "▁" starts a new piece.
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {
    utf8_decode(replacement_, 0, &replacement_cp_);
  }
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    for (Piece& p : *pieces) {
      std::string s;
      s.reserve(p.text.size() + replacement_.size());
      for (char c : p.text) {
        if (c == ' ') {
          s.append(replacement_);
        } else {
          s.push_back(c);
        }
      }
      const bool starts_with_replacement = s.compare(0, replacement_.size(), replacement_) == 0;
      bool prepend = false;
      switch (prepend_) {
        case Prepend::kAlways:
          prepend = true;
          break;
        case Prepend::kFirst:
          prepend = p.at_start;
          break;
        case Prepend::kNever:
          prepend = false;
          break;
      }
      if (prepend && !s.empty() && !starts_with_replacement) s.insert(0, replacement_);
      p.text = std::move(s);
    }
    if (split_) {
      split_pieces(pieces, [&](std::string_view text) {
        auto matches = char_matches(text, [&](char32_t c) { return c == replacement_cp_; });
        return apply_behavior(cover(text.size(), matches), SplitBehavior::kMergedWithNext, false);
      });
    }
  }

 private:
  std::string replacement_;
  char32_t replacement_cp_ = 0;
  Prepend prepend_;
  bool split_;
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    split_pieces(pieces, [&](std::string_view text) {
      return apply_behavior(cover(text.size(), char_matches(text, is_numeric)),
                            individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false);
    });
  }

 private:
  bool individual_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    for (const auto& s : steps_) s->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_type(spec, where);
  const std::string here = where + " (" + text_preview(type) + ")";
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(json_bool_or(spec, "add_prefix_space", true, here),
                                                   json_bool_or(spec, "use_regex", true, here));
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(parse_pattern(json_field(spec, "pattern", here), here),
                                               parse_behavior(json_string(spec, "behavior", here), here),
                                               json_bool_or(spec, "invert", false, here), here);
  }
  if (type == "Metaspace") {
    std::string replacement = json_string_or(spec, "replacement", "\xE2\x96\x81", here);
    char32_t cp;
    if (replacement.empty() || !utf8_is_valid(replacement) || utf8_decode(replacement, 0, &cp) != replacement.size()) {
      throw_config_error(here, ": 'replacement' must be one character");
    }
    using P = MetaspacePreTokenizer::Prepend;
    P prepend = json_bool_or(spec, "add_prefix_space", true, here) ? P::kAlways : P::kNever;
    if (spec.contains("prepend_scheme")) {
      const std::string scheme = json_string(spec, "prepend_scheme", here);
      if (scheme == "always") {
        prepend = P::kAlways;
      } else if (scheme == "first") {
        prepend = P::kFirst;
      } else if (scheme == "never") {
        prepend = P::kNever;
      } else {
        throw_config_error(here, ": unknown prepend_scheme '", text_preview(scheme), "' (expected always, first or never)");
      }
    }
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), prepend,
                                                   json_bool_or(spec, "split", true, here));
  }
  if (type == "Digits") {
    return std::make_unique<DigitsPreTokenizer>(json_bool_or(spec, "individual_digits", false, here));
  }
  if (type == "BertPreTokenizer") return make_bert_pre_tokenizer();
  if (type == "Sequence") {
    const Json& list = json_field(spec, "pretokenizers", here);
    if (!list.is_array()) throw_config_error(here, ": 'pretokenizers' must be a list");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const Json& s : list) {
      if (auto p = parse_pre_tokenizer(s, where)) steps.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  throw_config_error(where, ": pre_tokenizer type '", text_preview(type),
                     "' is not supported (supported: ByteLevel, Split, Metaspace, Digits, BertPreTokenizer, Sequence)");
}

}  // namespace pagoda::tokenizer_detail
