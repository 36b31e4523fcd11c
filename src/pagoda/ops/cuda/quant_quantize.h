// pagoda's quantizer (ops/quant's quantize_row) on the device: rows of float32 into GGML blocks, the same
// bytes quantize_row makes on the CPU. Used to make random quantized weights where they live (a Llama-3-8B
// shaped model has 7e9 of them).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagoda/core/quant_type.h"

namespace pagoda {

struct QuantQuantizeParams {
  const float* x = nullptr;  // [rows, cols] contiguous, finite, |x| small enough for fp16 scales
  void* out = nullptr;       // [rows, quant_row_bytes(type, cols)]; must not overlap x
  QuantType type = QuantType::kNone;
  int64_t rows = 0;
  int cols = 0;  // a positive multiple of the block size
};

// Enqueues the quantization on `stream`; allocates nothing, never synchronises.
void quant_quantize(const QuantQuantizeParams& p, cudaStream_t stream);

}  // namespace pagoda
