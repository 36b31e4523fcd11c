// FLASHINFER's CUDA runner (runner.h) over its plan and the correctness-first kernels of flashinfer_cuda.h.
// Built in CUDA builds but not registered: the declaration's make_runner() and kernels_built() start using
// it (PAGODA_BUILT_FLASHINFER) once flashinfer_gpu_test has passed on a device. PRIVATE to flashinfer/.
#pragma once

#include <memory>

#include "pagoda/attention/runner.h"

namespace pagoda {

// Throws a config pagoda::Error for a shape the kernels do not take (compute dtype other than bf16/fp16, a
// cache dtype other than it or fp8, a TurboQuant preset, a head size not a multiple of 32 up to 512).
std::unique_ptr<AttentionRunner> make_flashinfer_cuda_runner(const LayerShape& shape, const RunnerOptions& options);

}  // namespace pagoda
