// Dequantization of block-quantized weights (core/quant_type.h) on the device: rows of W (all of them, for a
// prefill GEMM through GemmRunner on the dequantized copy, or the rows of a list of ids, for an embedding
// lookup in a quantized table) into bf16, fp16 or fp32. Each weight is computed exactly as ggml's
// dequantize_row_* (and ops/quant's dequantize_row) computes it in float32, then rounded once to the output
// dtype (nearest even): bit for bit the CPU's value.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagoda/core/dtype.h"
#include "pagoda/core/quant_type.h"

namespace pagoda {

struct QuantDequantParams {
  const void* w = nullptr;  // [rows, cols]: rows of quant_row_bytes(type, cols) bytes, contiguous (2-byte aligned)
  QuantType type = QuantType::kNone;
  int64_t rows = 0;         // rows of w (the vocabulary of an embedding table)
  int cols = 0;             // a positive multiple of the block size
  // [out_rows] rows of w to dequantize, or nullptr: out row i is w row i (out_rows <= rows). An id outside
  // [0, rows) zero-fills its out row and sets *error_flag to 1 (never cleared here), as embedding() does.
  const int32_t* row_ids = nullptr;
  int* error_flag = nullptr;  // device int; required with row_ids
  int64_t out_rows = 0;
  void* out = nullptr;          // [out_rows, cols] contiguous, 16-byte aligned
  DType dtype = DType::kBF16;   // kBF16, kF16 or kF32
};

// Enqueues the dequantization on `stream`; allocates nothing, never synchronises.
void quant_dequant(const QuantDequantParams& p, cudaStream_t stream);

}  // namespace pagoda
