#include "pagoda/jinja/strings.h"

#include <utf8proc.h>

#include <algorithm>

#include "pagoda/jinja/value.h"

namespace pagoda::jinja {
namespace {

bool is_cased(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
char32_t lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
char32_t upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t title(char32_t c) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 ||
         c == 0x2029;
}

// Appends one piece of a split, within kMaxListItems (a split of a big string makes one list item per
// separator).
void add_part(std::vector<std::string>* parts, std::string part) {
  check_list_size(parts->size() + 1);
  parts->push_back(std::move(part));
}

}  // namespace

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string cps = to_code_points(s);
  const std::u32string set = chars ? to_code_points(*chars) : std::u32string();
  auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_py_space(c); };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strippable(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strippable(cps[e - 1])) --e;
  }
  return from_code_points(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) throw RenderError("empty separator");
    if (!from_right) {
      size_t pos = 0;
      for (size_t hit; (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) &&
                       (hit = s.find(*sep, pos)) != std::string_view::npos;) {
        add_part(&parts, std::string(s.substr(pos, hit - pos)));
        pos = hit + sep->size();
      }
      add_part(&parts, std::string(s.substr(pos)));
      return parts;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      add_part(&parts, std::string(s.substr(hit + sep->size(), end - hit - sep->size())));
      end = hit;
    }
    add_part(&parts, std::string(s.substr(0, end)));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  std::u32string cps = to_code_points(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  size_t i = 0;
  const size_t n = cps.size();
  while (true) {
    while (i < n && is_py_space(cps[i])) ++i;
    if (i >= n) break;
    size_t j = i;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      j = n;  // the rest, with its trailing whitespace
    } else {
      while (j < n && !is_py_space(cps[j])) ++j;
    }
    std::u32string part = cps.substr(i, j - i);
    if (from_right) std::reverse(part.begin(), part.end());
    add_part(&parts, from_code_points(part));
    i = j;
  }
  if (from_right) std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  const std::u32string cps = to_code_points(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_line_break(cps[i])) continue;
    add_part(&lines, from_code_points(std::u32string_view(cps).substr(start, i - start)));
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) add_part(&lines, from_code_points(std::u32string_view(cps).substr(start)));
  return lines;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {
    const std::u32string cps = to_code_points(s);
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      out += from_code_points(std::u32string_view(&c, 1));
      check_string_size(out.size());
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  for (size_t hit; (count < 0 || done < count) && (hit = s.find(old, pos)) != std::string_view::npos; ++done) {
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    check_string_size(out.size());
    pos = hit + old.size();
  }
  out.append(s.substr(pos));
  return out;
}

std::string py_lower(std::string_view s) {
  std::u32string cps = to_code_points(s);
  for (char32_t& c : cps) c = lower(c);
  return from_code_points(cps);
}

std::string py_upper(std::string_view s) {
  std::u32string cps = to_code_points(s);
  for (char32_t& c : cps) c = upper(c);
  return from_code_points(cps);
}

std::string py_capitalize(std::string_view s) {
  std::u32string cps = to_code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? title(cps[i]) : lower(cps[i]);
  return from_code_points(cps);
}

std::string py_title(std::string_view s) {
  std::u32string cps = to_code_points(s);
  bool prev_cased = false;
  for (char32_t& c : cps) {
    const bool cased = is_cased(c);
    c = prev_cased ? lower(c) : title(c);
    prev_cased = cased;
  }
  return from_code_points(cps);
}

std::string jinja_title(std::string_view s) {
  std::u32string cps = to_code_points(s);
  bool start = true;
  for (char32_t& c : cps) {
    const bool separator = is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    c = separator ? c : start ? upper(c) : lower(c);
    start = separator;
  }
  return from_code_points(cps);
}

bool py_is_printable(char32_t c) {
  if (c == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return false;
    default:
      return true;
  }
}

int64_t py_len(std::string_view s) { return static_cast<int64_t>(to_code_points(s).size()); }

bool py_is(std::string_view s, CharClass cls) {
  const std::u32string cps = to_code_points(s);
  if (cps.empty()) return false;
  bool has_cased = false;
  for (char32_t c : cps) {
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    const bool digit = cat == UTF8PROC_CATEGORY_ND;
    const bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
    switch (cls) {
      case CharClass::kDigit:
        if (!digit) return false;
        break;
      case CharClass::kAlpha:
        if (!alpha) return false;
        break;
      case CharClass::kAlnum:
        if (!digit && !alpha) return false;
        break;
      case CharClass::kSpace:
        if (!is_py_space(c)) return false;
        break;
      case CharClass::kLower:
        if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return false;
        has_cased |= cat == UTF8PROC_CATEGORY_LL;
        break;
      case CharClass::kUpper:
        if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) return false;
        has_cased |= cat == UTF8PROC_CATEGORY_LU;
        break;
    }
  }
  return (cls != CharClass::kLower && cls != CharClass::kUpper) || has_cased;
}

}  // namespace pagoda::jinja
