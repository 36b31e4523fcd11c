// Deterministic pseudo-random fill on the device (dummy weights of large models without a host round
// trip): element i = mean + std * z_i with z_i ~ approximately N(0, 1) (sum of four uniforms, rescaled),
// from a hash of (seed, i). Any float dtype.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagoda/core/dtype.h"

namespace pagoda {

struct RandomFillParams {
  void* data = nullptr;
  int64_t n = 0;
  DType dtype = DType::kBF16;  // kF32, kBF16 or kF16
  uint64_t seed = 0;
  float mean = 0.0f, std = 0.02f;
};

void random_fill(const RandomFillParams& p, cudaStream_t stream);

}  // namespace pagoda
