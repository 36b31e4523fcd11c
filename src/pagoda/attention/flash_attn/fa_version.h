// FlashAttention version resolution (spec §6.1): a pure function of the capability, the requested
// version and batch invariance, with the log lines it would emit.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pagoda/core/logging.h"
#include "pagoda/platform/device.h"

namespace pagoda {

struct FaVersionResolution {
  std::optional<int> version;  // nullopt: the requested version is unavailable on this device
  int attempted = 0;           // the version that was checked for availability
  std::string unavailable_reason;
  std::vector<LogRecord> log;  // WARNING A/B, ERROR C (not the INFO "Using FlashAttention version")
};

FaVersionResolution resolve_fa_version(ComputeCapability cc, std::optional<int> requested, bool batch_invariant);

}  // namespace pagoda
