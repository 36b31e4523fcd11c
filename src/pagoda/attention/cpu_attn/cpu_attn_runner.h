// CPU_ATTN's runner (runner.h) over cpu_attn.h: float32 queries and keys, any block and head size, a cache
// of the layer in the HND layout (cpu_attn.h) that the runner writes itself.
#pragma once

#include <memory>

#include "pagoda/attention/cpu_attn/cpu_attn.h"
#include "pagoda/attention/runner.h"

namespace pagoda {

// Throws a config pagoda::Error for a shape the CPU kernels do not take (compute dtype other than float32,
// a cache dtype outside float32/bfloat16/float16/fp8, heads that do not divide).
std::unique_ptr<AttentionRunner> make_cpu_attn_runner(const LayerShape& shape, const RunnerOptions& options);

// What every runner over CPU_ATTN's cache layout shares (CPU_ATTN, FLEX_ATTENTION's CPU runner):
// writes the step's new K/V (params.k / params.v at params.slot_mapping) into the layer's cache of `shape`;
void cpu_attn_write_step_kv(const LayerShape& shape, const AttentionParams& params);
// the model runner's thread pool as the kernels' parallel_for, the whole range in one body when `serial`
// (null when the options have no pool). The result refers to options.parallel_for: keep `options` alive.
CpuAttnParallelFor cpu_attn_parallel_for(const RunnerOptions& options, bool serial);

}  // namespace pagoda
