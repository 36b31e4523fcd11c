// Gated MLP activation: out[m, f] = silu(in[m, f]) * in[m, F + f] for the [M, 2F] output of a fused
// gate_up projection (gate in the first F columns, up in the last F). silu(g) = g / (1 + exp(-g)); fp32
// arithmetic with one rounding to the dtype (Hugging Face rounds silu(g) to the dtype before multiplying:
// at most one ulp apart).
#pragma once

#include <cuda_runtime_api.h>

#include "pagoda/core/dtype.h"

namespace pagoda {

struct SiluAndMulParams {
  const void* in = nullptr;  // [rows, 2 * cols] contiguous
  void* out = nullptr;       // [rows, cols] contiguous; must not overlap `in`
  int rows = 0, cols = 0;
  DType dtype = DType::kBF16;  // bfloat16, float16 or float32
};
// 16-byte accesses when cols is a multiple of 8 (16-bit) or 4 (fp32) and the pointers are 16-byte aligned;
// any other cols works, element by element.
void silu_and_mul(const SiluAndMulParams& p, cudaStream_t stream);

}  // namespace pagoda
