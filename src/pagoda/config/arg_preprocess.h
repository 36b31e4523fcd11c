// Pre-processing of the argument list (spec §9.4): dash normalisation, dotted options merged into JSON
// objects, duplicate detection and the "Found duplicate keys" WARNING.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

struct PreprocessedArgs {
  std::vector<std::string> args;        // dotted arguments removed, merged objects appended
  std::vector<std::string> duplicates;  // in the order found
};

// takes_value(name) says whether a regular option consumes the next argument (so that its value is not
// scanned as an option). Logs the duplicate WARNING when duplicates were found.
PreprocessedArgs preprocess_args(const std::vector<std::string>& args,
                                 const std::function<bool(std::string_view)>& takes_value);

// §9.4 step 3 for one value: JSON, else a human-readable integer, else the raw string; returned as JSON text.
std::string parse_dotted_value_to_json(std::string_view value);
// Human-readable integer ("25.6k" = 25600, "1K" = 1024); false when the text is not one.
bool parse_human_readable_int(std::string_view s, long long* out);

}  // namespace pagoda
