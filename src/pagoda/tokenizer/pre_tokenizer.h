// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): ByteLevel, Split, Metaspace, Digits, Sequence.
// Internal to pagoda_tokenizer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pagoda/tokenizer/json_util.h"

namespace pagoda::tokenizer_detail {

// One pre-token. `at_start`: it begins at offset 0 of the user's text (Metaspace prepend_scheme "first").
struct Piece {
  std::string text;
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits or rewrites each piece in place. PRECOND: every piece is valid UTF-8.
  virtual void pre_tokenize(std::vector<Piece>* pieces) const = 0;
};

// `spec` is the "pre_tokenizer" object; null gives nullptr. Throws a config error naming `where` for an
// unsupported type or option.
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& spec, const std::string& where);

}  // namespace pagoda::tokenizer_detail
