// FLEX_ATTENTION's CPU runner (runner.h) over flex_cpu.h: float32 queries, a cache of the layer in CPU_ATTN's
// HND order and dtypes (float32, bfloat16, float16) whatever shape.layout says (the runner writes and reads
// the cache itself; only the cache's size is shared, and it is the same in every order), any head size and
// block size. The mask comes from the layer's shape: causal, causal within a sliding window, a window alone, or
// every key of the sequence (non-causal); the soft-cap from the shape too.
#pragma once

#include <memory>

#include "pagoda/attention/runner.h"

namespace pagoda {

// Throws a config pagoda::Error for a shape the CPU kernel does not take (compute dtype other than float32,
// a cache dtype outside float32/bfloat16/float16, a TurboQuant preset, heads that do not divide).
std::unique_ptr<AttentionRunner> make_flex_attention_cpu_runner(const LayerShape& shape, const RunnerOptions& options);

}  // namespace pagoda
