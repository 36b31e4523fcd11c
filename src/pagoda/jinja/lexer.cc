#include "pagoda/jinja/lexer.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "pagoda/core/error.h"
#include "pagoda/core/utf8.h"
#include "pagoda/jinja/value.h"

namespace pagoda::jinja {

void throw_syntax_error(int line, const std::string& what) {
  throw_config_error("chat template line ", line, ": ", what);
}

namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Jinja2 turns \r\n and \r into \n and drops one trailing newline (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python str.rstrip(): drops trailing whitespace (Unicode-aware).
std::string_view py_rstrip(std::string_view s) {
  size_t keep = 0;
  for (size_t pos = 0; pos < s.size();) {
    char32_t c;
    const size_t len = utf8_decode(s, pos, &c);
    pos += len;
    if (!is_py_space(c)) keep = pos;
  }
  return s.substr(0, keep);
}

// Python's "unicode-escape" codec, which Jinja2 applies to string literals.
std::string unescape(std::string_view raw, int line) {
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 == raw.size()) {
      out += raw[i];
      continue;
    }
    const char e = raw[++i];
    auto hex_escape = [&](size_t digits) -> char32_t {
      char32_t v = 0;
      for (size_t k = 0; k < digits; ++k) {
        const int h = i + 1 + k < raw.size() ? hex_value(raw[i + 1 + k]) : -1;
        if (h < 0) throw_syntax_error(line, std::string("truncated \\") + e + " escape in a string literal");
        v = v * 16 + static_cast<char32_t>(h);
      }
      i += digits;
      return v;
    };
    switch (e) {
      case '\n':
        break;  // line continuation
      case '\\':
      case '\'':
      case '"':
        out += e;
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        utf8_append(hex_escape(2), &out);
        break;
      case 'u':
      case 'U': {
        char32_t cp = hex_escape(e == 'u' ? 4 : 8);
        // A UTF-16 surrogate pair written as two escapes becomes one character.
        if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < raw.size() && raw[i + 1] == '\\' && raw[i + 2] == 'u') {
          size_t save = i;
          i += 2;
          const char32_t low = hex_escape(4);
          if (low >= 0xDC00 && low < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else {
            i = save;
          }
        }
        if (cp > 0x10FFFF) throw_syntax_error(line, "\\U escape beyond U+10FFFF in a string literal");
        utf8_append(cp, &out);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7'; ++k) {
            v = v * 8 + static_cast<char32_t>(raw[++i] - '0');
          }
          utf8_append(v, &out);
        } else {
          out += '\\';  // unknown escapes stay as written, as in Python
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexOptions& options) : src_(std::move(source)), opt_(options) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t start = find_tag(pos_);
      const std::string_view rest = std::string_view(src_).substr(pos_, start - pos_);
      if (start == src_.size()) {
        emit_text(rest, line_);
        advance_to(start);
        break;
      }
      const char kind = src_[start + 1];
      size_t p = start + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      emit_text(strip_before_tag(rest, sign, kind != '{'), line_);
      advance_to(start);
      const int tag_line = line_;
      advance_to(p);
      if (kind == '#') {
        lex_comment(tag_line);
      } else if (kind == '%' && try_raw(tag_line)) {
        continue;
      } else {
        lex_tag(kind == '{', tag_line);
      }
    }
    out_.push_back(Token{TokenKind::kEof, "", line_});
    return std::move(out_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  void advance_to(size_t p) {
    for (; pos_ < p; ++pos_) line_ += src_[pos_] == '\n';
  }

  bool starts_with_at(size_t p, std::string_view s) const { return std::string_view(src_).substr(p, s.size()) == s; }

  // The text before a tag, after the tag's "-" or lstrip_blocks took their share.
  std::string_view strip_before_tag(std::string_view text, char sign, bool lstrip_kind) const {
    if (sign == '-') return py_rstrip(text);
    if (sign == '+' || !opt_.lstrip_blocks || !lstrip_kind) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return text;
    if (text.find_first_not_of(" \t", l_pos) != std::string_view::npos) return text;
    return text.substr(0, l_pos);
  }

  void emit_text(std::string_view text, int line) {
    if (!text.empty()) out_.push_back(Token{TokenKind::kText, std::string(text), line});
  }

  // After a tag's closing marker: "-" eats all whitespace, trim_blocks one newline after %} and #}.
  void after_tag_end(char sign, bool trims) {
    const size_t start = pos_;
    if (sign == '-') {
      size_t p = pos_;
      while (p < src_.size()) {
        char32_t c;
        const size_t len = utf8_decode(src_, p, &c);
        if (!is_py_space(c)) break;
        p += len;
      }
      advance_to(p);
    } else if (sign != '+' && trims && opt_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
      advance_to(pos_ + 1);
    }
    line_starting_ = pos_ > start && src_[pos_ - 1] == '\n';
  }

  void lex_comment(int tag_line) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw_syntax_error(tag_line, "unclosed comment: expected '#}'");
    const char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    advance_to(end + 2);
    after_tag_end(sign, true);
  }

  // {% raw %}...{% endraw %}: the content is text. Called with pos_ after "{%" and its sign.
  bool try_raw(int tag_line) {
    size_t p = skip_spaces(pos_);
    if (!starts_with_at(p, "raw") || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) return false;
    p = skip_spaces(p + 3);
    char sign = 0;
    if (starts_with_at(p, "-%}")) {
      sign = '-';
      ++p;
    }
    if (!starts_with_at(p, "%}")) return false;
    advance_to(p + 2);
    if (sign == '-') after_tag_end('-', false);
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
    for (size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t r = q + 2;
      char end_sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) end_sign = src_[r++];
      r = skip_spaces(r);
      if (!starts_with_at(r, "endraw")) continue;
      r = skip_spaces(r + 6);
      char close_sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) close_sign = src_[r++];
      if (!starts_with_at(r, "%}")) continue;
      const int text_line = line_;
      emit_text(strip_before_tag(std::string_view(src_).substr(pos_, q - pos_), end_sign, true), text_line);
      advance_to(r + 2);
      after_tag_end(close_sign, true);
      return true;
    }
    throw_syntax_error(tag_line, "unclosed 'raw' block: expected '{% endraw %}'");
  }

  size_t skip_spaces(size_t p) const {
    while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) ++p;
    return p;
  }

  // Tokens of a {{ }} or {% %} tag, up to and including its end marker. pos_ is after the begin marker.
  void lex_tag(bool is_var, int tag_line) {
    out_.push_back(Token{is_var ? TokenKind::kVarBegin : TokenKind::kBlockBegin, is_var ? "{{" : "{%", tag_line});
    std::string open;  // unclosed (, [ and {
    while (true) {
      advance_to(skip_spaces(pos_));
      if (pos_ >= src_.size()) {
        throw_syntax_error(tag_line, is_var ? "unclosed '{{': expected '}}'" : "unclosed '{%': expected '%}'");
      }
      if (open.empty()) {
        const char* end = is_var ? "}}" : "%}";
        char sign = 0;
        size_t len = 0;
        if ((src_[pos_] == '-' || (!is_var && src_[pos_] == '+')) && starts_with_at(pos_ + 1, end)) {
          sign = src_[pos_];
          len = 3;
        } else if (starts_with_at(pos_, end)) {
          len = 2;
        }
        if (len > 0) {
          out_.push_back(Token{is_var ? TokenKind::kVarEnd : TokenKind::kBlockEnd, end, line_});
          advance_to(pos_ + len);
          after_tag_end(sign, !is_var);
          return;
        }
      }
      const char c = src_[pos_];
      if (is_name_start(c)) {
        size_t e = pos_;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        out_.push_back(Token{TokenKind::kName, src_.substr(pos_, e - pos_), line_});
        advance_to(e);
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator(&open);
      }
    }
  }

  void lex_number() {
    const bool after_dot = !out_.empty() && out_.back().kind == TokenKind::kOp && out_.back().text == ".";
    size_t e = pos_;
    auto digits = [&] {
      while (e < src_.size() &&
             (is_digit(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() && is_digit(src_[e + 1])))) {
        ++e;
      }
    };
    digits();
    bool is_float = false;
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      ++e;
      digits();
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && is_digit(src_[x])) {
        e = x;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = pos_; i < e; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t{is_float ? TokenKind::kFloat : TokenKind::kInt, text, line_};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      const auto res = std::from_chars(text.data(), text.data() + text.size(), t.int_value);
      if (res.ec != std::errc()) throw_syntax_error(line_, "integer literal " + text + " is too large");
    }
    out_.push_back(std::move(t));
    advance_to(e);
  }

  void lex_string() {
    const char quote = src_[pos_];
    const int start_line = line_;
    size_t e = pos_ + 1;
    while (e < src_.size() && src_[e] != quote) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) throw_syntax_error(start_line, "unclosed string literal");
    const std::string value = unescape(std::string_view(src_).substr(pos_ + 1, e - pos_ - 1), start_line);
    out_.push_back(Token{TokenKind::kString, value, start_line});
    advance_to(e + 1);
  }

  void lex_operator(std::string* open) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwo) {
      if (starts_with_at(pos_, op)) {
        out_.push_back(Token{TokenKind::kOp, std::string(op), line_});
        advance_to(pos_ + 2);
        return;
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-*/%~<>=.,:|()[]{}").find(c) == std::string_view::npos) {
      throw_syntax_error(line_, std::string("unexpected character '") + c + "' in a tag");
    }
    if (c == '(' || c == '[' || c == '{') open->push_back(c);
    if (c == ')' || c == ']' || c == '}') {
      const char want = open->empty() ? 0 : open->back() == '(' ? ')' : open->back() == '[' ? ']' : '}';
      if (c != want) {
        throw_syntax_error(line_, std::string("unexpected '") + c + "'" +
                                      (want != 0 ? std::string(", expected '") + want + "'" : std::string()));
      }
      open->pop_back();
    }
    out_.push_back(Token{TokenKind::kOp, std::string(1, c), line_});
    advance_to(pos_ + 1);
  }

  std::string src_;
  LexOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the text that follows starts a line (Jinja2's lstrip_blocks rule)
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex_template(std::string_view source, const LexOptions& options) {
  return Lexer(normalize_newlines(source), options).run();
}

}  // namespace pagoda::jinja
