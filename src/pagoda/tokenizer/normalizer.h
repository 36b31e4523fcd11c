// Normalizers of tokenizer.json ("normalizer"): NFC/NFD/NFKC/NFKD, Prepend, Replace, Sequence.
// Internal to pagoda_tokenizer.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "pagoda/tokenizer/json_util.h"

namespace pagoda::tokenizer_detail {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // PRECOND: text is valid UTF-8; so is the result.
  virtual std::string normalize(std::string_view text) const = 0;
};

// `spec` is the "normalizer" object; null gives nullptr (no normalization). Throws a config error naming
// `where` for an unsupported type.
std::unique_ptr<Normalizer> parse_normalizer(const Json& spec, const std::string& where);

// A "pattern" object of Replace/Split: {"String": s} (literal) or {"Regex": r}. Sets exactly one.
struct PatternSpec {
  std::string literal;
  std::string regex;
  bool is_regex = false;
};
PatternSpec parse_pattern(const Json& spec, const std::string& where);

}  // namespace pagoda::tokenizer_detail
