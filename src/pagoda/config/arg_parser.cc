#include "pagoda/config/arg_parser.h"

#include <cstdint>
#include <cstdlib>

#include "pagoda/core/error.h"

namespace pagoda {

const OptionDecl* ArgParser::find(std::string_view name) const {
  for (const auto& o : options_) {
    if (o.name == name) return &o;
    for (const auto& a : o.aliases) if (a == name) return &o;
  }
  return nullptr;
}

bool ArgParser::takes_value(std::string_view name) const {
  const OptionDecl* o = find(name);
  return o && !o->metavar.empty();
}

bool ArgParser::has_no_form(std::string_view name) const {
  const OptionDecl* o = find(name);
  return o && o->set_no;
}

bool ArgParser::given(std::string_view name) const {
  for (const auto& g : given_) if (g == name) return true;
  return false;
}

bool ArgParser::parse(const std::vector<std::string>& args) {
  std::vector<std::string> unknown;
  bool positional_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") return false;
    if (arg.size() > 1 && arg[0] == '-' && !(arg.size() > 1 && (std::isdigit(static_cast<unsigned char>(arg[1])) || arg[1] == '.'))) {
      size_t eq = arg.find('=');
      std::string name = arg.substr(0, eq);
      const OptionDecl* o = find(name);
      if (!o && starts_with(name, "--no-")) {
        const OptionDecl* base = find("--" + name.substr(5));
        if (base && base->set_no) {
          if (eq != std::string::npos)
            throw_config_error("argument ", name, ": ignored explicit argument '", text_preview(arg.substr(eq + 1)), "'");
          base->set_no();
          given_.push_back(base->name);
          continue;
        }
      }
      if (!o) {
        unknown.push_back(arg);
        continue;
      }
      std::string value;
      if (o->metavar.empty()) {
        if (eq != std::string::npos)
          throw_config_error("argument ", o->name, ": ignored explicit argument '", text_preview(arg.substr(eq + 1)), "'");
        value = "true";
      } else if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
      } else if (i + 1 < args.size()) {
        value = args[++i];
        while (o->list && i + 1 < args.size() && !starts_with(args[i + 1], "-")) value += "," + args[++i];
      } else {
        throw_config_error("argument ", o->name, ": expected one argument");
      }
      o->set(value);
      given_.push_back(o->name);
      continue;
    }
    if (positional_set_ && !positional_done) {
      positional_set_(arg);
      positional_done = true;
      continue;
    }
    unknown.push_back(arg);
  }
  if (!unknown.empty()) throw_config_error("unrecognized arguments: ", text_preview(join(unknown, " "), 200));
  return true;
}

std::string ArgParser::help() const {
  std::string out = str_cat("usage: ", prog_, positional_name_.empty() ? "" : " [" + positional_name_ + "]", " [options]\n\n", description_, "\n");
  if (!positional_name_.empty()) out += str_cat("\npositional arguments:\n  ", positional_name_, "\n      ", positional_help_, "\n");
  std::string section = "\x01";
  for (const auto& o : options_) {
    if (o.section != section) {
      section = o.section;
      out += str_cat("\n", section.empty() ? "options" : section + " options", ":\n");
    }
    std::string names = o.name;
    for (const auto& a : o.aliases) names += ", " + a;
    if (o.set_no) names += ", --no-" + o.name.substr(2);
    if (!o.metavar.empty()) names += " " + o.metavar;
    out += str_cat("  ", names, "\n      ", o.help);
    if (o.show) {
      std::string d = o.show();
      if (!d.empty() && !o.metavar.empty()) out += str_cat(" (default: ", d, ")");
    }
    out += "\n";
  }
  out += "\n  -h, --help\n      show this help message and exit\n";
  return out;
}

std::vector<std::pair<std::string, std::string>> ArgParser::dump() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& o : options_)
    if (o.show) out.emplace_back(o.name.substr(2), o.show());
  return out;
}

int parse_int_arg(std::string_view option, const std::string& v) { return parse_int_arg(option, v, INT32_MAX, "int32"); }

int parse_int_arg(std::string_view option, const std::string& v, int max, std::string_view what) {
  const long long n = parse_int64_arg(option, v);
  if (n > max) throw_config_error("argument ", option, ": ", n, " is out of range: at most ", max, " (", what, ")");
  if (n < INT32_MIN) throw_config_error("argument ", option, ": ", n, " is out of range: at least ", INT32_MIN, " (int32)");
  return int(n);
}

long long parse_int64_arg(std::string_view option, const std::string& v) {
  long long n = 0;
  if (!parse_int64(v, &n)) {
    // A well-formed integer too large for int64 is out of range, not "invalid".
    std::string_view digits = v;
    if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) digits.remove_prefix(1);
    if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos)
      throw_config_error("argument ", option, ": ", text_preview(v), " is out of range (int64)");
    throw_config_error("argument ", option, ": invalid int value: '", text_preview(v), "'");
  }
  return n;
}

double parse_float_arg(std::string_view option, const std::string& v) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size())
    throw_config_error("argument ", option, ": invalid float value: '", text_preview(v), "'");
  return d;
}

bool parse_bool_arg(std::string_view option, const std::string& v) {
  std::string s = to_lower(v);
  if (s == "true" || s == "1" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return false;
  throw_config_error("argument ", option, ": invalid bool value: '", text_preview(v), "'");
}

void check_choice(std::string_view option, const std::string& v, const std::vector<std::string>& choices) {
  for (const auto& c : choices) if (c == v) return;
  std::vector<std::string> quoted;
  for (const auto& c : choices) quoted.push_back("'" + c + "'");
  throw_config_error("argument ", option, ": invalid choice: '", text_preview(v), "' (choose from ", join(quoted, ", "), ")");
}

}  // namespace pagoda
