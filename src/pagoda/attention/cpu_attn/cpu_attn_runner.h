// CPU_ATTN's runner (runner.h) over cpu_attn.h: float32 queries and keys, any block and head size, a cache
// of the layer in the HND layout (cpu_attn.h) that the runner writes itself.
#pragma once

#include <memory>

#include "pagoda/attention/runner.h"

namespace pagoda {

// Throws a config pagoda::Error for a shape the CPU kernels do not take (compute dtype other than float32,
// a cache dtype outside float32/bfloat16/float16/fp8, heads that do not divide).
std::unique_ptr<AttentionRunner> make_cpu_attn_runner(const LayerShape& shape, const RunnerOptions& options);

}  // namespace pagoda
