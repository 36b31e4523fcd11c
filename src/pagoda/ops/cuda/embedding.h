// Embedding lookup: out[t, :] = table[ids[t], :]. An id outside [0, vocab) does not read the table: its row
// of `out` is zero-filled and *error_flag is set to 1 (check it after the step; it is never cleared here).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagoda/core/dtype.h"

namespace pagoda {

struct EmbeddingParams {
  const int32_t* ids = nullptr;  // [tokens], device
  const void* table = nullptr;   // [vocab, hidden] contiguous
  void* out = nullptr;           // [tokens, hidden] contiguous
  int tokens = 0, hidden = 0, vocab = 0;
  DType dtype = DType::kBF16;    // any float dtype: rows are copied bit for bit
  int* error_flag = nullptr;     // device int, required
};
// Rows whose byte size is a multiple of 16 (with 16-byte aligned pointers) are copied 16 bytes at a time.
void embedding(const EmbeddingParams& p, cudaStream_t stream);

}  // namespace pagoda
