#include "pagoda/model/cuda/cuda_linear.h"

#include <algorithm>

#include "pagoda/core/error.h"
#include "pagoda/ops/cuda/quant_dequant.h"
#include "pagoda/ops/cuda/quant_gemv.h"

namespace pagoda {

bool linear_uses_gemv(const LinearContext& ctx, const CudaMatrix& w, int rows, bool may_dequantize) {
  if (!w.quantized() || !w.all_quantized() || ctx.dtype == DType::kF32) return false;
  return rows <= kQuantGemvMaxRows || ctx.batch_invariant || !may_dequantize;
}

size_t linear_scratch_bytes(const CudaMatrix& w, DType dtype) {
  return w.quantized() ? size_t(w.rows) * size_t(w.cols) * dtype_size(dtype) : 0;
}

void linear(const LinearContext& ctx, const CudaMatrix& w, const void* x, const void* bias, void* y, int rows,
            bool may_dequantize) {
  if (rows == 0) return;
  const DType dt = ctx.dtype;
  const size_t es = dtype_size(dt);
  if (!w.quantized()) {
    ctx.gemm->run({x, w.parts.front().data, bias, y, rows, w.rows, w.cols, dt}, ctx.stream);
    return;
  }
  if (linear_uses_gemv(ctx, w, rows, may_dequantize)) {
    for (int r0 = 0; r0 < rows; r0 += kQuantGemvMaxRows) {
      int col = 0;
      for (const CudaMatrix::Part& part : w.parts) {
        QuantGemvParams p;
        p.x = static_cast<const uint8_t*>(x) + size_t(r0) * w.cols * es;
        p.w = part.data;
        p.type = part.quant;
        p.bias = bias ? static_cast<const uint8_t*>(bias) + size_t(col) * es : nullptr;
        p.y = static_cast<uint8_t*>(y) + (size_t(r0) * w.rows + col) * es;
        p.m = std::min(kQuantGemvMaxRows, rows - r0);
        p.n = part.rows;
        p.k = w.cols;
        p.ldy = w.rows;
        p.dtype = dt;
        p.batch_invariant = ctx.batch_invariant;
        quant_gemv(p, ctx.stream);
        col += part.rows;
      }
    }
    return;
  }
  PAGODA_CHECK(ctx.scratch && ctx.scratch_bytes >= linear_scratch_bytes(w, dt), "linear: scratch of ",
               ctx.scratch_bytes, " bytes for a ", w.rows, " x ", w.cols, " matrix");
  uint8_t* s = static_cast<uint8_t*>(ctx.scratch);
  for (const CudaMatrix::Part& part : w.parts) {
    const size_t bytes = size_t(part.rows) * w.cols * es;
    if (part.quant == QuantType::kNone) {
      PAGODA_CUDA_CHECK(cudaMemcpyAsync(s, part.data, bytes, cudaMemcpyDeviceToDevice, ctx.stream));
    } else {
      QuantDequantParams p;
      p.w = part.data;
      p.type = part.quant;
      p.rows = part.rows;
      p.cols = w.cols;
      p.out_rows = part.rows;
      p.out = s;
      p.dtype = dt;
      quant_dequant(p, ctx.stream);
    }
    s += bytes;
  }
  ctx.gemm->run({x, ctx.scratch, bias, y, rows, w.rows, w.cols, dt}, ctx.stream);
}

}  // namespace pagoda
