#include "pagoda/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "pagoda/core/error.h"
#include "pagoda/tokenizer/unicode.h"

namespace pagoda::tokenizer_detail {

namespace {

// Unicode White_Space, as a class body: the ASCII controls \t..\r, NEL, and the Z categories.
constexpr std::string_view kWhiteSpaceClassBody = "\\t-\\r\\x{85}\\p{Z}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

std::string onig_compatible_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        if (in_class) {
          out.append(kWhiteSpaceClassBody);
        } else {
          out.append("[").append(kWhiteSpaceClassBody).append("]");
        }
      } else if (n == 'S' && !in_class) {
        out.append("[^").append(kWhiteSpaceClassBody).append("]");
      } else {
        out.push_back(c);
        out.push_back(n);
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

Regex::Regex(std::string_view pattern, const std::string& where) {
  const std::string rewritten = onig_compatible_pattern(pattern);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (code == nullptr) {
    throw_config_error(where, ": the regex pattern '", text_preview(pattern), "' does not compile (", pcre2_message(err),
                       " at offset ", err_offset, ")");
  }
  auto c = std::make_shared<Code>();
  c->code = code;
  c->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = std::move(c);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), &pcre2_match_data_free);
  PAGODA_CHECK(md != nullptr, "out of memory creating PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // The JIT's machine stack is small; a pathological input that overflows it is retried with the
    // interpreter, which keeps its backtracking state on the heap.
    int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr)
                        : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      throw_runtime_error("tokenizer: regex matching failed on a ", text.size(), "-byte input: ", pcre2_message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t begin = ov[0], end = ov[1];
    out.emplace_back(begin, end);
    if (end > begin) {
      pos = end;
    } else if (end < text.size()) {
      pos = end + utf8_char_len(static_cast<unsigned char>(text[end]));
    } else {
      break;
    }
  }
  return out;
}

}  // namespace pagoda::tokenizer_detail
