// FLASHINFER's CPU runner (runner.h): the planner of flashinfer_plan.h executed by the CPU reference
// (flashinfer_cpu.h) in float32. float32 queries; a cache in shape.layout (NHD or HND) of float32,
// bfloat16, float16 or fp8 that the runner writes itself; any page size; head sizes of the declaration and
// any other; causal, sliding window, non-causal, soft-cap; cascade (options.cascade) over the block tables
// of the step (AttentionBatch::block_tables). PRIVATE to flashinfer/.
#pragma once

#include <memory>

#include "pagoda/attention/runner.h"

namespace pagoda {

// Throws a config pagoda::Error for a shape the CPU reference does not take (compute dtype other than
// float32, a TurboQuant preset, heads that do not divide).
std::unique_ptr<AttentionRunner> make_flashinfer_cpu_runner(const LayerShape& shape, const RunnerOptions& options);

}  // namespace pagoda
