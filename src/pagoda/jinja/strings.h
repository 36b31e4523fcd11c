// Python str methods on UTF-8 text, for pagoda's Jinja subset (internal to pagoda_jinja). Character
// positions and counts are in code points, as Python's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::jinja {

// str.strip / lstrip / rstrip: `chars` absent means whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / rsplit: `sep` absent splits on runs of whitespace and drops empty parts; maxsplit < 0: no limit.
// Throws RenderError for an empty separator.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right);
std::vector<std::string> py_splitlines(std::string_view s);
// str.replace: count < 0 replaces all; an empty `old` inserts `repl` around every character.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_capitalize(std::string_view s);  // first character upper, the rest lower
std::string py_title(std::string_view s);       // str.title()
// Jinja's title filter: words start after whitespace or one of - ( { [ <.
std::string jinja_title(std::string_view s);
// Python str.isprintable() for one character: false for control, format, separator (but ' '), surrogate,
// private-use and unassigned characters; repr() escapes those.
bool py_is_printable(char32_t c);
// Number of code points.
int64_t py_len(std::string_view s);

enum class CharClass { kDigit, kAlpha, kAlnum, kSpace, kLower, kUpper };
// str.isdigit() and friends: true when non-empty and every character is in the class (kLower/kUpper: has a
// cased character and none of the other case).
bool py_is(std::string_view s, CharClass c);

}  // namespace pagoda::jinja
