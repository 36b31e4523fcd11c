#include "pagoda/attention/flash_attn/fa_version.h"

namespace pagoda {

FaVersionResolution resolve_fa_version(ComputeCapability cc, std::optional<int> requested, bool batch_invariant) {
  FaVersionResolution r;
  int v = cc.major == 9 ? 3 : 2;
  if (requested) v = *requested;
  if (cc.major >= 10 && v == 3) {
    r.log.push_back({LogLevel::kWarning,
                     "Cannot use FA version 3 on Blackwell platform, defaulting to FA version 4 if supported, otherwise FA2."});
    v = 2;
  }
  if (batch_invariant && v == 4) {
    r.log.push_back({LogLevel::kWarning, "Cannot use FA version 4 with batch invariance, defaulting to FA version 2."});
    v = 2;
  }
  r.attempted = v;
  bool available = false;
  switch (v) {
    case 2:
      available = cc >= ComputeCapability{8, 0};
      r.unavailable_reason = "FA2 is only supported on devices with compute capability >= 8";
      break;
    case 3:
      available = cc.major == 9;
      r.unavailable_reason = "FA3 is only supported on devices with compute capability 9.x";
      break;
    default:
      r.unavailable_reason = "FA4 is unavailable due to: pagoda was built without FlashAttention 4";
      break;
  }
  if (!available) {
    r.log.push_back({LogLevel::kError, str_cat("Cannot use FA version ", v, " is not supported due to ", r.unavailable_reason)});
    return r;
  }
  r.unavailable_reason.clear();
  r.version = v;
  return r;
}

}  // namespace pagoda
