// Dense matmul y = x @ W^T (+ bias): the linear layers of the CPU forward pass.
#pragma once

#include <cstdint>

#include "pagoda/core/dtype.h"
#include "pagoda/core/quant_type.h"
#include "pagoda/ops/thread_pool.h"

namespace pagoda {

struct MatmulParams {
  const float* x = nullptr;   // [m, k] activations, row stride ldx (elements)
  const void* w = nullptr;    // [n, k] weights (a PyTorch Linear's layout), rows contiguous, dtype w_dtype
  DType w_dtype = DType::kF32;  // kF32, kBF16 or kF16; unused when w_quant is set
  // Block-quantized weights: each row of W is quant_row_bytes(w_quant, k) bytes (k % block_elems == 0).
  QuantType w_quant = QuantType::kNone;
  const float* bias = nullptr;  // [n] or nullptr
  float* y = nullptr;         // [m, n] output, row stride ldy; must not alias x
  int64_t m = 0, n = 0, k = 0;
  int64_t ldx = 0;  // 0 = k
  int64_t ldy = 0;  // 0 = n
};

// Accumulates in float32. Each y[i][j] is computed by the same sequence of operations whatever m, the
// thread count or the row's place in the batch, so a sequence gets bit-identical results alone or batched.
// With w_quant set, the activations are quantized per block to int8 and the products summed in integers
// (ops/quant/quant_matmul.h gives the order and the error bound). PRECOND: w_dtype is kF32, kBF16 or kF16,
// or w_quant is set and k % block_elems == 0.
void matmul(const MatmulParams& p, ThreadPool* pool);

// Float64 reference of the same product (tests, and the oracle for future kernels). Quantized W is taken as
// dequantize_row gives it; x is used unquantized.
void matmul_reference(const MatmulParams& p, double* y);

}  // namespace pagoda
