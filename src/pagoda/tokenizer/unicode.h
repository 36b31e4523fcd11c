// UTF-8 and Unicode helpers shared by the tokenizer stages (internal to pagoda_tokenizer).
//
// Invalid UTF-8 is handled the way Rust's String::from_utf8_lossy does (the reference tokenizer is written
// in Rust): each maximal invalid subpart becomes one U+FFFD.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace pagoda::tokenizer_detail {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Decodes the code point at s[pos]. Returns the number of bytes it spans (>= 1 while pos < s.size()).
// On invalid input sets *cp = kReplacementChar and returns the length of the maximal invalid subpart.
size_t utf8_decode(std::string_view s, size_t pos, char32_t* cp, bool* valid = nullptr);
// Length of the UTF-8 sequence that starts with lead byte `b` (1 for a stray continuation byte).
size_t utf8_char_len(unsigned char b);
void utf8_append(char32_t cp, std::string* out);
bool utf8_is_valid(std::string_view s);
// Replaces every maximal invalid subpart with U+FFFD.
std::string utf8_lossy(std::string_view s);
// Bytes at the end of `s` that begin a character but stop before its end (0..3): held back by streaming.
size_t utf8_incomplete_tail(std::string_view s);

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
