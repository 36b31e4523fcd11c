// Field access for tokenizer.json and friends that turns a missing or mistyped field into a user error
// naming the file and the field. Internal to pagoda_tokenizer (keeps nlohmann/json out of tokenizer.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "pagoda/core/error.h"
#include "pagoda/core/json_checks.h"

namespace pagoda::tokenizer_detail {

using Json = nlohmann::json;

// `where` names the file and the object being read, e.g. "/m/tokenizer.json: pre_tokenizer".
inline const Json& json_field(const Json& obj, std::string_view key, const std::string& where) {
  if (!obj.is_object()) throw_config_error(where, ": expected a JSON object, found ", obj.type_name());
  auto it = obj.find(key);
  if (it == obj.end()) throw_config_error(where, ": missing field '", key, "'");
  return *it;
}

inline std::string json_string(const Json& obj, std::string_view key, const std::string& where) {
  const Json& v = json_field(obj, key, where);
  if (!v.is_string()) throw_config_error(where, ": field '", key, "' must be a string, found ", v.type_name());
  return v.get<std::string>();
}

// Optional boolean: `fallback` when absent or null.
inline bool json_bool_or(const Json& obj, std::string_view key, bool fallback, const std::string& where) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw_config_error(where, ": field '", key, "' must be true or false");
  return it->get<bool>();
}

// Optional string: `fallback` when absent or null.
inline std::string json_string_or(const Json& obj, std::string_view key, std::string_view fallback,
                                  const std::string& where) {
  if (!obj.is_object()) return std::string(fallback);
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::string(fallback);
  if (!it->is_string()) throw_config_error(where, ": field '", key, "' must be a string");
  return it->get<std::string>();
}

// The "type" of a component object (normalizer, pre_tokenizer, decoder, ...).
inline std::string json_type(const Json& obj, const std::string& where) { return json_string(obj, "type", where); }

}  // namespace pagoda::tokenizer_detail
