// Small string helpers used across pagoda (concatenation, joining, Python-style list renderings).
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

std::string join(const std::vector<std::string>& parts, std::string_view sep);
// ['a', 'b'] — single-quoted items, as Python prints a list of str.
std::string py_str_list(const std::vector<std::string>& items);
std::vector<std::string> split(std::string_view s, char sep);
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);
std::string_view trim(std::string_view s);
bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);
// Parses a whole string as a base-10 integer; false when it is not one (or overflows).
bool parse_int64(std::string_view s, long long* out);
// Human-readable byte counts: "1.50 GiB".
std::string format_bytes(double bytes);
// A user-given text for one line of an error message: at most `max_chars` bytes (never cutting a UTF-8
// character), control characters escaped as \n, \t or \xNN, and " ... (N bytes)" when it was cut, so a
// hostile file cannot flood the terminal or split the message over lines.
std::string text_preview(std::string_view s, size_t max_chars = 60);

}  // namespace pagoda
