// The PAGODA_* environment variables (spec §9.6), read and validated in one place.
#pragma once

#include <optional>
#include <string>

#include "pagoda/core/kv_layout.h"

namespace pagoda {


struct EnvSettings {
  bool batch_invariant = false;            // PAGODA_BATCH_INVARIANT=1
  std::optional<KvLayout> kv_cache_layout;  // PAGODA_KV_CACHE_LAYOUT
  std::optional<std::string> logging_level;  // PAGODA_LOGGING_LEVEL (validated)
};

// Throws the exact "Invalid value '{value}' for {VAR}. Valid options: [...]." config error.
EnvSettings read_env_settings();

}  // namespace pagoda
