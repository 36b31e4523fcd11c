// A small command-line parser built from option declarations: each option is declared once with its
// name, value name, help text, default and setter; parsing, help text and the config dump come from it.
// Options are parsed left to right and a later occurrence replaces an earlier one (spec §9.4 step 7).
// Syntax errors (unknown option, missing or malformed value) throw config errors (exit status 2).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

struct OptionDecl {
  std::string name;                  // "--block-size"
  std::vector<std::string> aliases;  // "-ac"
  std::string metavar;               // empty for flags
  std::string help;
  std::string section;               // "model", "cache", ... for the help and the dump
  std::function<void(const std::string&)> set;  // flags receive "true"
  std::function<std::string()> show;            // current value, for the startup dump; may be empty
  std::function<void()> set_no;                 // for --no-NAME; empty when there is no such form
  // A list: `--name a,b` or `--name a b ...` (the arguments up to the next option, as a config file's list
  // expands), `set` receiving the items joined with ','.
  bool list = false;
};

class ArgParser {
 public:
  ArgParser(std::string prog, std::string description) : prog_(std::move(prog)), description_(std::move(description)) {}

  void add(OptionDecl d) { options_.push_back(std::move(d)); }
  // A positional argument (at most one is used by pagoda's commands).
  void add_positional(std::string name, std::string help, std::function<void(const std::string&)> set) {
    positional_name_ = std::move(name);
    positional_help_ = std::move(help);
    positional_set_ = std::move(set);
  }

  const OptionDecl* find(std::string_view name) const;
  // The declared options, in declaration order (the Python API maps keyword arguments onto them).
  const std::vector<OptionDecl>& options() const { return options_; }
  bool takes_value(std::string_view name) const;
  bool has_no_form(std::string_view name) const;  // --no-NAME exists

  // Parses pre-processed arguments. Returns false when --help/-h was given (help printed by the caller).
  bool parse(const std::vector<std::string>& args);
  // Whether an option (by canonical name) was given on the command line or in a config file.
  bool given(std::string_view name) const;
  std::string help() const;
  // "name: value" lines for the options of a section, for the startup dump.
  std::vector<std::pair<std::string, std::string>> dump() const;

 private:
  std::string prog_, description_;
  std::vector<OptionDecl> options_;
  std::vector<std::string> given_;
  std::string positional_name_, positional_help_;
  std::function<void(const std::string&)> positional_set_;
};

// Typed value helpers used by setters: they throw the argparse-style syntax errors.
int parse_int_arg(std::string_view option, const std::string& v);  // int32; out of range is refused, not wrapped
// The same, refusing values above `max`; `what` says what the bound is ("pagoda's context length limit").
int parse_int_arg(std::string_view option, const std::string& v, int max, std::string_view what);
long long parse_int64_arg(std::string_view option, const std::string& v);
double parse_float_arg(std::string_view option, const std::string& v);
bool parse_bool_arg(std::string_view option, const std::string& v);
void check_choice(std::string_view option, const std::string& v, const std::vector<std::string>& choices);

}  // namespace pagoda
