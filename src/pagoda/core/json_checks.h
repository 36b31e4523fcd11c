// Reading values out of user JSON (config.json, tokenizer.json, config files) so that error messages stay
// one short line and numbers are checked before they are narrowed. Header-only and templated on the JSON
// type, so pagoda_core needs no JSON library: callers pass nlohmann::json or nlohmann::ordered_json.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "pagoda/core/strings.h"

namespace pagoda {

// What a value is, for "field 'x' must be an integer, got <preview>": its JSON type, with a short preview
// for scalars ("the string \"gelu\"", "the number 1.5", "a list of 3 items", "an object of 2 keys"). Never
// serialises a whole array or object: a user value may be megabytes long or nested deep.
template <class Json>
std::string json_preview(const Json& v, size_t max_chars = 60) {
  if (v.is_string()) return "the string \"" + text_preview(v.template get_ref<const std::string&>(), max_chars) + "\"";
  if (v.is_array()) return str_cat("a list of ", v.size(), v.size() == 1 ? " item" : " items");
  if (v.is_object()) return str_cat("an object of ", v.size(), v.size() == 1 ? " key" : " keys");
  if (v.is_null()) return "null";
  if (v.is_boolean()) return v.template get<bool>() ? "true" : "false";
  if (v.is_number()) return "the number " + text_preview(v.dump(), max_chars);  // a scalar: dump() is short
  return v.type_name();
}

// The value as an int64 when it is a JSON integer, or a float whose value is integral and inside int64
// (1e9, 4096.0, as some files write integers); nullopt otherwise (1.5, 1e30, "8", true, null).
template <class Json>
std::optional<int64_t> json_integral(const Json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.template get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) return std::nullopt;
    return int64_t(u);
  }
  if (v.is_number_integer()) return v.template get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.template get<double>();
    // -2^63 is exact in a double; 2^63 is not an int64.
    if (std::isfinite(d) && d == std::trunc(d) && d >= -0x1p63 && d < 0x1p63) return int64_t(d);
  }
  return std::nullopt;
}

}  // namespace pagoda
