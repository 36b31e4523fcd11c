#include "pagoda/cli/command_line.h"

#include <cstdio>
#include <cstdlib>

#include "pagoda/config/arg_preprocess.h"
#include "pagoda/config/config_files.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"

namespace pagoda {

void apply_early_log_level(const std::vector<std::string>& raw) {
  if (const char* v = std::getenv("PAGODA_LOGGING_LEVEL")) {
    auto l = log_level_from_name(v);
    if (l && std::string_view(v) == log_level_name(*l)) set_log_level(*l);
  }
  for (size_t i = 0; i < raw.size(); ++i) {
    std::string value;
    if ((raw[i] == "--log-level" || raw[i] == "--log_level") && i + 1 < raw.size()) value = raw[i + 1];
    else if (starts_with(raw[i], "--log-level=") || starts_with(raw[i], "--log_level=")) value = raw[i].substr(12);
    if (auto l = log_level_from_name(value)) set_log_level(*l);
  }
}

bool parse_command_line(ArgParser& parser, const std::vector<std::string>& raw, bool has_positional) {
  for (const auto& a : raw) {
    if (a == "-h" || a == "--help") {
      std::fputs(parser.help().c_str(), stdout);
      return false;
    }
  }
  auto expanded = expand_config_files(raw, has_positional, [&](std::string_view n) { return parser.has_no_form(n); });
  auto pre = preprocess_args(expanded, [&](std::string_view n) { return parser.takes_value(n); });
  return parser.parse(pre.args);
}

ValidatedArgs validate_engine_command(const EngineArgs& args) {
  ValidatedArgs v = validate_engine_args(args);
  if (!args.device.log_level.empty()) set_log_level(*log_level_from_name(args.device.log_level));
  return v;
}

void write_text_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw_runtime_error("cannot write ", path);
  std::fprintf(f, "%s\n", text.c_str());
  std::fclose(f);
}

void report_error(const std::string& message) { PAGODA_LOG_ERROR(message); }

}  // namespace pagoda
