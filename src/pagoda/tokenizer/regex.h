// A compiled PCRE2 pattern (UTF + UCP, JIT when available) used by Split pre-tokenizers and Replace
// normalizers. Internal to pagoda_tokenizer.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::tokenizer_detail {

class Regex {
 public:
  // Throws a config error naming `where` when the pattern does not compile.
  Regex(std::string_view pattern, const std::string& where);

  // Byte ranges [begin, end) of the successive non-overlapping matches, left to right; an empty match
  // moves the search on by one character. PRECOND: text is valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;  // immutable after construction, shared by copies and threads
};

// Hugging Face tokenizers compiles patterns with Oniguruma, where \s is Unicode White_Space; PCRE2's \s
// also matches U+180E. Rewrites \s (and \S outside classes) into explicit White_Space classes.
std::string onig_compatible_pattern(std::string_view pattern);

}  // namespace pagoda::tokenizer_detail
