#include "pagoda/config/config_files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include "pagoda/core/error.h"
#include "pagoda/core/json_depth.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/read_file.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

struct FileOption {
  std::string flag;        // "--config"
  std::string kind;        // "yaml" or "json", for messages
  std::string more_than_one;
  std::string missing;
};

std::string read_file_or_throw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::string sys = std::strerror(errno);
    PAGODA_LOG_ERROR("Unable to read the config file at ", path, ". Check path correctness");
    throw_config_error("Unable to read the config file at ", path, ": ", sys);
  }
  return read_user_file(path, kMaxConfigFileBytes);
}

// A config file maps option names to values: a few hundred nodes. YAML aliases let a small file name
// exponentially many (a: &a [x, x], b: &b [*a, *a], ...), all of which the conversion would copy.
constexpr int64_t kMaxYamlNodes = 100000;

bool is_plain(const YAML::Node& n) { return n.Tag() == "?" || n.Tag().empty(); }

// `depth`: the nesting of `n`, bounded like JSON's; `budget`: nodes still allowed.
Json yaml_to_json(const YAML::Node& n, const std::string& path, int depth, int64_t& budget) {
  if (--budget < 0)
    throw_config_error("Config file ", path, " expands to more than ", kMaxYamlNodes,
                       " values (YAML aliases repeating each other?); write the options out plainly");
  if (depth > kMaxJsonDepth)
    throw_config_error("Config file ", path, " nests deeper than ", kMaxJsonDepth, " levels");
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Sequence: {
      Json a = Json::array();
      for (const auto& item : n) a.push_back(yaml_to_json(item, path, depth + 1, budget));
      return a;
    }
    case YAML::NodeType::Map: {
      Json o = Json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = yaml_to_json(kv.second, path, depth + 1, budget);
      return o;
    }
    case YAML::NodeType::Scalar: {
      std::string s = n.Scalar();
      if (!is_plain(n)) return s;
      if (s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
      long long i = 0;
      if (parse_int64(s, &i)) return i;
      try {
        size_t pos = 0;
        double d = std::stod(s, &pos);
        if (pos == s.size()) return d;
      } catch (const std::exception&) {
      }
      return s;
    }
  }
  return nullptr;
}

Json load_mapping(const std::string& path, const std::string& text, bool yaml) {
  // yaml-cpp bounds its own recursion (its DeepRecursion error); yaml_to_json bounds the rest.
  if (!yaml) check_json_depth(text, "Config file " + path);
  Json j;
  try {
    int64_t budget = kMaxYamlNodes;
    j = yaml ? yaml_to_json(YAML::Load(text), path, 0, budget) : Json::parse(text);
  } catch (const Error&) {
    throw;
  } catch (const YAML::DeepRecursion& e) {
    throw_config_error("Config file ", path, " nests deeper than ", kMaxJsonDepth, " levels (line ", e.mark.line + 1, ")");
  } catch (const std::exception& e) {
    throw_config_error("Unable to parse the config file at ", path, ": ", text_preview(e.what(), 200));
  }
  if (!j.is_object()) throw_config_error("Config file ", path, " must contain a mapping of option names to values.");
  return j;
}

std::string scalar_text(const Json& v) {
  if (v.is_null()) return "None";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  return v.dump();
}

std::vector<std::string> mapping_to_args(const Json& j, const std::function<bool(std::string_view)>& has_no_form) {
  std::vector<std::string> out;
  for (const auto& [key, v] : j.items()) {
    std::string flag = "--" + key;
    for (size_t i = 2; i < flag.size(); ++i) if (flag[i] == '_') flag[i] = '-';
    if (v.is_boolean()) {
      if (v.get<bool>()) out.push_back(flag);
      else if (has_no_form(flag)) out.push_back("--no-" + flag.substr(2));
    } else if (v.is_array()) {
      if (v.empty()) continue;
      out.push_back(flag);
      for (const auto& item : v) out.push_back(scalar_text(item));
    } else if (v.is_object()) {
      out.push_back(flag);
      out.push_back(v.dump());
    } else {
      out.push_back(flag);
      out.push_back(scalar_text(v));
    }
  }
  return out;
}

// Finds FLAG FILE in args (also FLAG=FILE), removes it, and returns the file; errors per §9.5.
std::optional<std::string> take_file_option(std::vector<std::string>& args, const FileOption& opt) {
  std::optional<std::string> file;
  std::vector<std::string> rest;
  std::string alt = opt.flag;  // accept the underscore spelling too
  for (size_t i = 2; i < alt.size(); ++i) if (alt[i] == '-') alt[i] = '_';
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string value;
    bool hit = false;
    if (a == opt.flag || a == alt) {
      if (i + 1 >= args.size()) throw_config_error(opt.missing);
      value = args[++i];
      hit = true;
    } else if (starts_with(a, opt.flag + "=") || starts_with(a, alt + "=")) {
      value = a.substr(a.find('=') + 1);
      hit = true;
    }
    if (!hit) {
      rest.push_back(a);
      continue;
    }
    if (file) throw_config_error(opt.more_than_one);
    file = value;
  }
  args = rest;
  return file;
}

}  // namespace

std::vector<std::string> expand_config_files(const std::vector<std::string>& input, bool has_positional,
                                             const std::function<bool(std::string_view)>& has_no_form) {
  std::vector<std::string> args = input;
  const FileOption yaml_opt{"--config", "yaml", "More than one config file specified!",
                            "No config file specified! Please check your command-line arguments."};
  const FileOption json_opt{"--json-config", "json", "More than one JSON config file specified!",
                            "No JSON config file specified! Please check your command-line arguments."};
  std::optional<std::string> yaml_file = take_file_option(args, yaml_opt);
  std::optional<std::string> json_file = take_file_option(args, json_opt);

  std::vector<std::string> generated;
  if (yaml_file) {
    auto dot = yaml_file->rfind('.');
    std::string ext = dot == std::string::npos ? *yaml_file : yaml_file->substr(dot + 1);
    if (ext != "yaml" && ext != "yml") throw_config_error("Config file must be of a yaml/yml type. ", ext, " supplied");
    auto more = mapping_to_args(load_mapping(*yaml_file, read_file_or_throw(*yaml_file), true), has_no_form);
    generated.insert(generated.end(), more.begin(), more.end());
  }
  if (json_file) {
    auto dot = json_file->rfind('.');
    std::string ext = dot == std::string::npos ? *json_file : json_file->substr(dot + 1);
    if (ext != "json") throw_config_error("Config file must be of a json type. ", ext, " supplied");
    auto more = mapping_to_args(load_mapping(*json_file, read_file_or_throw(*json_file), false), has_no_form);
    generated.insert(generated.end(), more.begin(), more.end());
  }
  if (generated.empty()) return args;

  size_t insert_at = 0;
  if (has_positional && !args.empty() && !args[0].empty() && args[0][0] != '-') insert_at = 1;
  // A `model` key becomes `--model`: serve takes it as the model when no positional was given.
  args.insert(args.begin() + long(insert_at), generated.begin(), generated.end());
  return args;
}

}  // namespace pagoda
