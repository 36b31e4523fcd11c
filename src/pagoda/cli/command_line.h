// The argument pipeline every pagoda command runs (spec §9.4, §9.5, §9.7): config-file expansion,
// pre-processing, parsing; and the common error reporting.
#pragma once

#include <string>
#include <vector>

#include "pagoda/config/arg_parser.h"
#include "pagoda/config/engine_args.h"

namespace pagoda {

// Sets the log level from --log-level in the raw arguments or PAGODA_LOGGING_LEVEL, when valid, so that
// lines logged before full validation are filtered correctly. Invalid values are reported later, in order.
void apply_early_log_level(const std::vector<std::string>& raw_args);

// Runs config-file expansion, pre-processing and parsing. Returns false when help was requested (and
// printed). Throws config errors.
bool parse_command_line(ArgParser& parser, const std::vector<std::string>& raw_args, bool has_positional);

// validate_engine_args, then the log level the arguments (config files included) chose.
ValidatedArgs validate_engine_command(const EngineArgs& args);

// Writes `text` and a newline to `path` (the benchmarks' --output-json). Throws a runtime error.
void write_text_file(const std::string& path, const std::string& text);

// Reports an error the way every command does: an ERROR log line with the message.
void report_error(const std::string& message);

}  // namespace pagoda
