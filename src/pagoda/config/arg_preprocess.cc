#include "pagoda/config/arg_preprocess.h"

#include <cctype>
#include <cmath>
#include <regex>

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/core/json_depth.h"
#include "pagoda/core/logging.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

// `option` names the argument in errors.
Json parse_value(std::string_view value, std::string_view option) {
  // The value is dump()ed into the merged object's text, which recurses per level.
  check_json_depth(value, str_cat("argument ", text_preview(option)));
  try {
    return Json::parse(value);
  } catch (const std::exception&) {
  }
  long long n = 0;
  if (parse_human_readable_int(value, &n)) return Json(n);
  return Json(std::string(value));
}

// "--attention_config.x" -> "--attention-config.x": underscores in the name part before the first '.'/'='.
std::string normalise_dashes(const std::string& arg) {
  if (!starts_with(arg, "--")) return arg;
  std::string out = arg;
  for (size_t i = 2; i < out.size() && out[i] != '.' && out[i] != '='; ++i)
    if (out[i] == '_') out[i] = '-';
  return out;
}

bool is_option_like(const std::string& arg) {
  if (arg.size() < 2 || arg[0] != '-') return false;
  size_t i = arg[1] == '-' ? 2 : 1;
  return i < arg.size() && std::isalpha(static_cast<unsigned char>(arg[i]));
}

struct DottedGroup {
  std::string prefix;
  Json object = Json::object();
};

}  // namespace

bool parse_human_readable_int(std::string_view s, long long* out) {
  static const std::regex re(R"(^(\d+(?:\.\d+)?)([kmgtKMGT])$)");
  std::string str(s);
  std::smatch m;
  if (!std::regex_match(str, m, re)) return false;
  char suffix = m[2].str()[0];
  bool binary = std::isupper(static_cast<unsigned char>(suffix));
  bool has_decimals = m[1].str().find('.') != std::string::npos;
  if (binary && has_decimals) return false;  // decimals only with the decimal (lower-case) suffixes
  int power = int(std::string_view("kmgt").find(char(std::tolower(suffix)))) + 1;
  // A value beyond int64 is not a human-readable int (it stays a string, which the option then refuses).
  if (has_decimals) {
    long double v = std::stold(m[1].str());
    for (int i = 0; i < power; ++i) v *= 1000;
    if (!(v < 0x1p63L)) return false;
    *out = (long long)v;
    return true;
  }
  long long v = 0;
  if (!parse_int64(m[1].str(), &v)) return false;
  for (int i = 0; i < power; ++i)
    if (__builtin_mul_overflow(v, binary ? 1024 : 1000, &v)) return false;
  *out = v;
  return true;
}

std::string parse_dotted_value_to_json(std::string_view value) { return parse_value(value, "value").dump(); }

PreprocessedArgs preprocess_args(const std::vector<std::string>& input,
                                 const std::function<bool(std::string_view)>& takes_value) {
  PreprocessedArgs result;
  std::vector<std::string> seen_regular;
  std::vector<DottedGroup> groups;

  for (size_t i = 0; i < input.size(); ++i) {
    std::string arg = input[i];
    if (!is_option_like(arg)) {
      result.args.push_back(arg);
      continue;
    }
    arg = normalise_dashes(arg);
    size_t eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    size_t dot = name.find('.');
    if (dot == std::string::npos) {  // a regular option
      if (starts_with(name, "--")) {
        bool dup = false;
        for (const auto& s : seen_regular) dup = dup || s == name;
        if (dup) result.duplicates.push_back(name);
        else seen_regular.push_back(name);
      }
      result.args.push_back(arg);
      if (eq == std::string::npos && takes_value(name) && i + 1 < input.size()) result.args.push_back(input[++i]);
      continue;
    }
    // A dotted option: PREFIX.K1.K2[+] with its value after '=' or in the next argument.
    std::string prefix = name.substr(0, dot);
    std::vector<std::string> keys = split(std::string_view(name).substr(dot + 1), '.');
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < input.size()) {
      value = input[++i];
    } else {
      throw_config_error("argument ", text_preview(name), ": expected one argument");
    }
    for (const auto& k : keys)
      if (k.empty() || (k == "+" )) throw_config_error("argument ", text_preview(name), ": invalid dotted option name");
    // Each key is a level of the merged object, whose dump() recurses per level.
    if (keys.size() > size_t(kMaxJsonDepth))
      throw_config_error("argument ", text_preview(name), ": more than ", kMaxJsonDepth, " dotted keys");
    bool append = ends_with(keys.back(), "+");
    if (append) keys.back().pop_back();

    DottedGroup* g = nullptr;
    for (auto& existing : groups) if (existing.prefix == prefix) g = &existing;
    if (!g) {
      groups.push_back({prefix, Json::object()});
      g = &groups.back();
    }
    Json* node = &g->object;
    for (size_t k = 0; k + 1 < keys.size(); ++k) {
      Json& child = (*node)[keys[k]];
      if (!child.is_object()) child = Json::object();
      node = &child;
    }
    const std::string& leaf = keys.back();
    if (append) {
      Json& list = (*node)[leaf];
      if (!list.is_array()) list = Json::array();
      for (const auto& item : split(value, ',')) list.push_back(parse_value(item, name));
    } else {
      if (node->contains(leaf)) result.duplicates.push_back(prefix + "." + join(keys, "."));
      (*node)[leaf] = parse_value(value, name);
    }
  }

  if (!result.duplicates.empty()) PAGODA_LOG_WARNING("Found duplicate keys ", join(result.duplicates, ", "));
  for (const auto& g : groups) {
    result.args.push_back(g.prefix);
    result.args.push_back(g.object.dump());
  }
  return result;
}

}  // namespace pagoda
