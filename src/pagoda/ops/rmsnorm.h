// RMSNorm: y = w * x / sqrt(mean(x^2) + eps), per row, in float32 (as Hugging Face Llama/Qwen compute it).
#pragma once

#include <cstdint>

#include "pagoda/ops/thread_pool.h"

namespace pagoda {

struct RmsNormParams {
  const float* x = nullptr;  // [rows, cols], row stride ldx
  const float* w = nullptr;  // [cols]
  float* y = nullptr;        // [rows, cols], row stride ldy; may equal x (in place)
  int64_t rows = 0, cols = 0;
  int64_t ldx = 0, ldy = 0;  // 0 = cols
  float eps = 1e-6f;
};

void rmsnorm(const RmsNormParams& p, ThreadPool* pool);

}  // namespace pagoda
