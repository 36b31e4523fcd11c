// PRIVATE to model/cuda/: the linear layers of the GPU forward pass, y[rows, w.rows] = x[rows, w.cols] @ W^T
// (+ bias), over a CudaMatrix. Dense weights go to cuBLASLt. Quantized weights take the quantized GEMV
// (ops/cuda/quant_gemv.h, up to kQuantGemvMaxRows activation rows per launch; one row takes its int8 kernel,
// the CPU's arithmetic, unless batch invariance is on) for decode-sized steps, and
// for larger ones are dequantized into a scratch buffer for cuBLASLt (the prefill path: its GEMM's
// arithmetic dwarfs the extra pass). With batch invariance on, the quantized GEMV serves every step size,
// so a row's result never depends on how many rows the step has. fp32 compute always dequantizes (the
// GEMV multiplies 16-bit values).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "pagoda/core/dtype.h"
#include "pagoda/model/cuda/cuda_weights.h"
#include "pagoda/ops/cuda/gemm.h"

namespace pagoda {

struct LinearContext {
  GemmRunner* gemm = nullptr;
  DType dtype = DType::kBF16;   // x, W's dense parts, bias and y
  bool batch_invariant = false;
  void* scratch = nullptr;      // dequantized weights; linear_scratch_bytes() of the largest matrix
  size_t scratch_bytes = 0;
  cudaStream_t stream = nullptr;
};

// Whether a step of `rows` rows runs the quantized GEMV on w (else dense GEMM, or dequantize + GEMM).
// may_dequantize = false (the lm_head, whose dequantized copy would be the largest of all): the GEMV for
// any row count where it applies.
bool linear_uses_gemv(const LinearContext& ctx, const CudaMatrix& w, int rows, bool may_dequantize = true);

// Scratch bytes the dequantize path needs for w (0 for dense weights).
size_t linear_scratch_bytes(const CudaMatrix& w, DType dtype);

// Enqueues the layer on ctx.stream. x: [rows, w.cols]; y: [rows, w.rows]; bias: [w.rows] or nullptr; all
// 16-byte aligned. No allocation, no synchronisation (CUDA-graph safe once each shape ran eagerly).
void linear(const LinearContext& ctx, const CudaMatrix& w, const void* x, const void* bias, void* y, int rows,
            bool may_dequantize = true);

}  // namespace pagoda
