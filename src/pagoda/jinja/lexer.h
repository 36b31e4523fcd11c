// Lexer of pagoda's Jinja subset (internal to pagoda_jinja): template source -> tokens.
//
// Text between tags becomes kText tokens with Jinja2's whitespace rules already applied, as Hugging Face
// configures them (trim_blocks and lstrip_blocks on):
//   {%- / {{- / {#-   strip all whitespace before the tag;   -%} / -}} / -#}  strip all whitespace after it;
//   trim_blocks       drops the first newline after a block tag or comment (not after }});
//   lstrip_blocks     drops spaces and tabs between the start of a line and a block tag or comment;
//   {%+ / +%}         turn lstrip_blocks / trim_blocks off for that tag.
// Comments vanish; {% raw %}...{% endraw %} becomes text. Inside {{ }} and {% %} come names, literals and
// operators; a }} or %} inside brackets does not end the tag (as in Jinja2).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::jinja {

enum class TokenKind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  TokenKind kind;
  std::string text;  // text, name, operator, or the unescaped string literal
  int line;          // 1-based line where the token starts
  int64_t int_value = 0;
  double float_value = 0;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws pagoda::Error (kConfig) for an unclosed tag, comment or string, or a character no token starts
// with, naming the line. The last token is kEof.
std::vector<Token> lex_template(std::string_view source, const LexOptions& options);

// "chat template line N: <what>": the prefix of every syntax error.
[[noreturn]] void throw_syntax_error(int line, const std::string& what);

}  // namespace pagoda::jinja
