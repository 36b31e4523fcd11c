// TURBOQUANT's CUDA runner (runner.h): the kernels of turboquant_cuda_attention.h over the paged planner's work
// list. The cache is written by the model's RoPE + cache-write kernel (ops/cuda/rope_kv.h, its TurboQuant
// path), so run() only reads it.
#pragma once

#include <memory>

#include "pagoda/attention/runner.h"

namespace pagoda {

// Throws a config pagoda::Error for a shape the kernels do not take (shape.kv_preset not a turboquant_* preset,
// a compute dtype other than bf16/fp16, a head size above 512, a block size not a multiple of 16, a sliding
// window, soft-cap or non-causal attention).
std::unique_ptr<AttentionRunner> make_turboquant_cuda_runner(const LayerShape& shape, const RunnerOptions& options);

}  // namespace pagoda
