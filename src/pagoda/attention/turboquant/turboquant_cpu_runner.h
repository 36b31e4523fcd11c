// TURBOQUANT's CPU runner (runner.h) over turboquant_cpu.h: float32 queries, keys and values, a packed cache of
// the layer (turboquant_cpu.h) that the runner writes itself, any block and head size.
#pragma once

#include <memory>

#include "pagoda/attention/runner.h"

namespace pagoda {

// Throws a config pagoda::Error for a shape the CPU kernels do not take (compute dtype other than float32, a
// cache that is not a turboquant_* preset of kU8 bytes, heads that do not divide, non-causal attention, a
// sliding window or logit soft-capping).
std::unique_ptr<AttentionRunner> make_turboquant_cpu_runner(const LayerShape& shape, const RunnerOptions& options);

}  // namespace pagoda
