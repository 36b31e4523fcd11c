#include "pagoda/core/utf8.h"

namespace pagoda {

size_t utf8_char_len(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 1;
}

size_t utf8_decode(std::string_view s, size_t pos, char32_t* cp, bool* valid) {
  auto fail = [&](size_t len) {
    *cp = kReplacementChar;
    if (valid) *valid = false;
    return len;
  };
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (valid) *valid = true;
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  const size_t len = utf8_char_len(b0);
  if (len == 1) return fail(1);
  // The allowed range of the second byte excludes overlong forms, surrogates and code points > U+10FFFF.
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 == 0xE0) lo = 0xA0;
  if (b0 == 0xED) hi = 0x9F;
  if (b0 == 0xF0) lo = 0x90;
  if (b0 == 0xF4) hi = 0x8F;
  char32_t c = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t i = 1; i < len; ++i) {
    if (pos + i >= s.size()) return fail(i);
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if (b < lo || b > hi) return fail(i);
    lo = 0x80;
    hi = 0xBF;
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  return len;
}

void utf8_append(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool utf8_is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    char32_t cp;
    bool ok;
    i += utf8_decode(s, i, &cp, &ok);
    if (!ok) return false;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    bool ok;
    const size_t n = utf8_decode(s, i, &cp, &ok);
    if (ok) {
      out.append(s.substr(i, n));
    } else {
      out.append(kReplacementUtf8);
    }
    i += n;
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
  for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    const size_t i = s.size() - k;
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: the lead is further back
    if (utf8_char_len(b) <= k) return 0;
    // A lead byte whose sequence is cut off: incomplete only if the bytes so far are a valid beginning
    // (decoding then fails exactly at the end of the input).
    char32_t cp;
    bool valid;
    return utf8_decode(s, i, &cp, &valid) == k ? k : 0;
  }
  return 0;
}

std::string terminal_safe(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    char32_t cp = 0;
    bool valid = true;
    const size_t n = utf8_decode(s, pos, &cp, &valid);
    if (cp == U'\r') {
    } else if (!valid || (cp < 0x20 && cp != U'\n' && cp != U'\t') || (cp >= 0x7F && cp < 0xA0)) {
      out += kReplacementUtf8;
    } else {
      out.append(s.substr(pos, n));
    }
    pos += n;
  }
  return out;
}

}  // namespace pagoda
