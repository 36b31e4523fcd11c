// Token embedding lookup.
#pragma once

#include <cstdint>

#include "pagoda/core/dtype.h"
#include "pagoda/core/quant_type.h"
#include "pagoda/ops/thread_pool.h"

namespace pagoda {

struct EmbeddingParams {
  const void* table = nullptr;  // [vocab, hidden], dtype
  DType dtype = DType::kF32;    // kF32, kBF16, kF16; unused when quant is set
  // Block-quantized rows (quant_row_bytes(quant, hidden) bytes each, hidden % block_elems == 0): a looked-up
  // row is dequantized exactly as dequantize_row does.
  QuantType quant = QuantType::kNone;
  int64_t vocab = 0, hidden = 0;
  const int32_t* ids = nullptr;  // [num_tokens]
  int64_t num_tokens = 0;
  float* out = nullptr;  // [num_tokens, hidden]
};

// Throws a runtime pagoda::Error naming the token when an id is outside [0, vocab).
void embedding_lookup(const EmbeddingParams& p, ThreadPool* pool);

}  // namespace pagoda
