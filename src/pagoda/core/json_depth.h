// A nesting bound for JSON text that comes from users and files (request bodies, config.json,
// tokenizer.json, config files), checked before a parser, a recursive walk or an error message's dump()
// sees the value: nlohmann's dump(), copies into other value types and our own conversions recurse once
// per level, so an unbounded depth is a stack overflow.
#pragma once

#include <string_view>

namespace pagoda {

// Real files and requests nest a few levels (a tool's JSON schema perhaps twenty); 128 leaves room for
// any of them and keeps every recursive walk's stack use small.
inline constexpr int kMaxJsonDepth = 128;

// Throws pagoda::Error (config) naming `what` and the byte offset when arrays and objects in `text` nest
// deeper than `max_depth`. Brackets inside strings do not count. Linear in the text, no allocation.
void check_json_depth(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth);

}  // namespace pagoda
