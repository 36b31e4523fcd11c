// FLASHINFER's CUDA runner (runner.h) over its plan and the kernels of flashinfer_cuda.h. Registered in CUDA
// builds (PAGODA_BUILT_FLASHINFER: the declaration's make_runner() returns it). A step with cascade groups must
// run eagerly (wants_eager): a captured decode grid replays no plan. PRIVATE to flashinfer/.
#pragma once

#include <memory>

#include "pagoda/attention/runner.h"

namespace pagoda {

// Throws a config pagoda::Error for a shape the kernels do not take (compute dtype other than bf16/fp16, a
// cache dtype other than it or fp8, a TurboQuant preset, a head size not a multiple of 32 up to 512).
std::unique_ptr<AttentionRunner> make_flashinfer_cuda_runner(const LayerShape& shape, const RunnerOptions& options);

}  // namespace pagoda
