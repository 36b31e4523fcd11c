// FLEX_ATTENTION's CUDA runner (runner.h) over flex_cuda.h: the layer's mask (flex_layer.h) and soft-cap over
// the paged cache in FLEX_ATTENTION's layout (NHD), float32 / float16 / bfloat16 queries over a cache of
// float32 / float16 / bfloat16, any head size, any block size. The cache is written
// by the model's RoPE + cache-write kernel, as for the other CUDA runners, so run() only reads it.
#pragma once

#include <memory>

#include "pagoda/attention/runner.h"

namespace pagoda {

// Throws a config pagoda::Error for a shape the kernels do not take (an fp8 or TurboQuant cache, heads that do
// not divide, tiles past the kernels' block_n values).
std::unique_ptr<AttentionRunner> make_flex_attention_cuda_runner(const LayerShape& shape, const RunnerOptions& options);

}  // namespace pagoda
