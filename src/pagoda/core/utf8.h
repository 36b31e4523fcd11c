// UTF-8 codec, shared by the tokenizer and the Jinja engine. Invalid UTF-8 is handled the way Rust's
// String::from_utf8_lossy does (the reference tokenizer is written in Rust): each maximal invalid subpart
// becomes one U+FFFD.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pagoda {

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
// Text safe to write to a terminal: invalid UTF-8 and control characters (C0 but tab and newline, DEL,
// C1 — ESC and CSI sequences among them, which can move the cursor or switch the character set) each become
// U+FFFD, except carriage return, which is dropped (it would let later text overwrite the line).
std::string terminal_safe(std::string_view s);
// Bytes at the end of `s` that begin a character but stop before its end (0..3): held back by streaming.
size_t utf8_incomplete_tail(std::string_view s);

}  // namespace pagoda
