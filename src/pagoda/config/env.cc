#include "pagoda/config/env.h"

#include <cstdlib>

#include "pagoda/core/error.h"

namespace pagoda {

EnvSettings read_env_settings() {
  EnvSettings s;
  if (const char* v = std::getenv("PAGODA_BATCH_INVARIANT")) {
    std::string value = v;
    if (value != "0" && value != "1")
      throw_config_error("Invalid value '", value, "' for PAGODA_BATCH_INVARIANT. Valid options: ['0', '1'].");
    s.batch_invariant = value == "1";
  }
  if (const char* v = std::getenv("PAGODA_KV_CACHE_LAYOUT")) {
    std::string value = v;
    if (value == "NHD") s.kv_cache_layout = KvLayout::kNHD;
    else if (value == "HND") s.kv_cache_layout = KvLayout::kHND;
    else throw_config_error("Invalid value '", value, "' for PAGODA_KV_CACHE_LAYOUT. Valid options: ['NHD', 'HND'].");
  }
  if (const char* v = std::getenv("PAGODA_LOGGING_LEVEL")) {
    std::string value = v;
    if (value != "DEBUG" && value != "INFO" && value != "WARNING" && value != "ERROR")
      throw_config_error("Invalid value '", value, "' for PAGODA_LOGGING_LEVEL. Valid options: ['DEBUG', 'INFO', 'WARNING', 'ERROR'].");
    s.logging_level = value;
  }
  return s;
}

}  // namespace pagoda
