// Element-wise ops of the decoder: SwiGLU and the residual add.
#pragma once

#include <cstdint>

#include "pagoda/ops/thread_pool.h"

namespace pagoda {

struct SwigluParams {
  const float* gate = nullptr;  // [rows, cols], row stride ld_in
  const float* up = nullptr;    // [rows, cols], row stride ld_in
  float* out = nullptr;         // [rows, cols], row stride ld_out; may equal gate or up
  int64_t rows = 0, cols = 0;
  int64_t ld_in = 0, ld_out = 0;  // 0 = cols
};

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
void swiglu(const SwigluParams& p, ThreadPool* pool);

// y[i] += x[i], i < n.
void add_inplace(float* y, const float* x, int64_t n, ThreadPool* pool);

}  // namespace pagoda
