// Matrix-vector products over block-quantized weights, for decode: y[m, n] = x[m, k] @ W[n, k]^T (+ bias[n])
// with W in a GGML block format (core/quant_type.h), read as stored, and m <= kQuantGemvMaxRows.
//
// Two kernels:
// - The 16-bit kernel (any m, every format): each weight row is dequantized in registers to exact small
//   integers (the block's codes, as bf16/fp16 values) and multiplied with x on the tensor cores (mma
//   m16n8k16, fp32 accumulation); the block and sub-block scales and mins are applied in fp32 once per 16 or
//   32 weights. The weights stream through shared memory in 16-byte copies (cp.async), so any row alignment
//   the formats allow (2-byte for Q4_0, Q5_0, Q8_0, Q6_K) reads coalesced. The result of an output depends
//   only on its row of x, W and k: never on m or on the other rows (batch invariant).
// - The int8 kernel (m = 1 without batch_invariant; every format, k a multiple of 256 (2048 for Q6_K) up to
//   32768, x 16-byte aligned): x is quantized to int8 per block and multiplied with the stored codes in integers,
//   as the CPU does (ops/quant/quant_matmul.h: the same codes, scales and per-block terms; only the order of
//   the float additions across blocks differs), for fewer instructions per weight byte in decode.
//
//   quant_gemv({.x = x, .w = w, .type = QuantType::kQ4_K, .y = y, .m = 1, .n = 4096, .k = 4096,
//               .dtype = DType::kBF16}, stream);
//
// Allocates nothing and never synchronises (CUDA-graph safe).
#pragma once

#include <cuda_runtime_api.h>

#include "pagoda/core/dtype.h"
#include "pagoda/core/quant_type.h"

namespace pagoda {

inline constexpr int kQuantGemvMaxRows = 32;

struct QuantGemvParams {
  const void* x = nullptr;     // [m, k] row-major activations, dtype; 8-byte aligned
  const void* w = nullptr;     // [n, k]: n rows of quant_row_bytes(type, k) bytes, contiguous; 16-byte aligned
  QuantType type = QuantType::kNone;
  const void* bias = nullptr;  // [n] in dtype, or nullptr
  void* y = nullptr;           // [m, n] with row stride ldy, dtype; must not overlap x or w
  int m = 0, n = 0, k = 0;     // 0 <= m <= kQuantGemvMaxRows; n >= 1; k a positive multiple of the block size
  int ldy = 0;                 // elements between rows of y (>= n); 0 = n. A fused q|k|v of parts in different
                               // formats writes each part's columns of one output.
  DType dtype = DType::kBF16;  // kBF16 or kF16: x, bias and y
  // true: every m runs the 16-bit kernel, so an output never depends on m (batch invariance); false: m = 1
  // runs the int8 kernel where it applies (quant_gemv_i8_applies).
  bool batch_invariant = false;
  // Benchmark knobs of the 16-bit kernel (setting one selects it); the result does not depend on them.
  int ctas = 0;    // CTAs to launch, each looping over 16-row tiles (0: one per tile)
  int stages = 0;  // ring depth 2..4 of the bf16 m = 1 kernel of Q4_K and Q8_0 (0: the default)
};

// Whether p runs the int8 kernel.
bool quant_gemv_i8_applies(const QuantGemvParams& p);

// Throws pagoda::Error (an internal check) on a violated precondition.
void quant_gemv(const QuantGemvParams& p, cudaStream_t stream);

}  // namespace pagoda
