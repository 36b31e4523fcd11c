// Config files (spec §9.5): `--config FILE.yaml` and `--json-config FILE.json` expand into command-line
// arguments inserted right after the subcommand (after the positional model of `pagoda serve MODEL`),
// YAML first, then JSON, so options given on the command line override them.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

// args: the arguments after the subcommand. has_positional: the command takes a positional argument
// (serve's MODEL). has_no_form(name): `--no-NAME` exists for a boolean option `--NAME`.
std::vector<std::string> expand_config_files(const std::vector<std::string>& args, bool has_positional,
                                             const std::function<bool(std::string_view)>& has_no_form);

}  // namespace pagoda
