#include "pagoda/core/json_depth.h"

#include "pagoda/core/error.h"

namespace pagoda {

void check_json_depth(std::string_view text, std::string_view what, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        throw_config_error(what, ": JSON nested deeper than ", max_depth, " levels (at byte ", i, ")");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace pagoda
