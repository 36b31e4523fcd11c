// FLASH_ATTN's runner (runner.h): FA2 (the paged kernel family, paged/) and, with version 3 on SM 9.0, the
// FA3 prefill kernel for prefill chunks (flash_attn.h).
#pragma once

#include <memory>

#include "pagoda/attention/runner.h"

namespace pagoda {

// Throws a config pagoda::Error for a shape the kernels do not take.
std::unique_ptr<AttentionRunner> make_flash_attn_runner(const LayerShape& shape, const RunnerOptions& options);

}  // namespace pagoda
