// TRITON_ATTN's runner (runner.h): the paged kernel family (paged/) in one unified launch per layer, or a
// prefill and a decode launch with use_prefill_decode_attention (spec §6.5).
#pragma once

#include <memory>

#include "pagoda/attention/runner.h"

namespace pagoda {

// Throws a config pagoda::Error for a shape the kernels do not take.
std::unique_ptr<AttentionRunner> make_triton_attn_runner(const LayerShape& shape, const RunnerOptions& options);

}  // namespace pagoda
