// Unicode helpers shared by the tokenizer stages (internal to pagoda_tokenizer); the UTF-8 codec itself is
// core/utf8.h.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "pagoda/core/utf8.h"

namespace pagoda::tokenizer_detail {

// Rust char::is_whitespace (Unicode White_Space).
bool is_whitespace(char32_t cp);
// The Rust regex crate's Unicode \w (UTS #18): Alphabetic, marks, decimal digits, connector punctuation
// and the joiners U+200C/U+200D. Alphabetic is taken as L*, Nl and the letter-like symbols in
// Other_Alphabetic (circled and squared Latin letters); its other members are marks, already included.
bool is_word_char(char32_t cp);
// Rust char::is_numeric: general categories Nd, Nl, No.
bool is_numeric(char32_t cp);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// PRECOND: s is valid UTF-8.
std::string unicode_normalize(std::string_view s, NormalForm form);

// GPT-2's byte-level alphabet: every byte maps to one printable code point.
struct ByteLevelAlphabet {
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its code point
  std::array<int, 324> char_to_byte;          // code point (all are < 324) -> byte, -1 if not in the alphabet
};
const ByteLevelAlphabet& byte_level_alphabet();

}  // namespace pagoda::tokenizer_detail
