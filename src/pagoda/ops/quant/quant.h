// Block-quantized weights on the CPU: the plain reference of every format (dequantize, quantize) and the
// entry points the model uses. The fast kernels (int8 dot products over blocks, AVX2 / AVX-512 VNNI chosen
// at run time) are private to this folder and reached through matmul() (ops/gemm.h) with
// MatmulParams::w_quant set.
#pragma once

#include <cstdint>

#include "pagoda/core/quant_type.h"

namespace pagoda {

// Dequantizes n weights (one or more whole blocks) of type t into float32, exactly as ggml does.
// PRECOND: t != kNone, n % quant_traits(t).block_elems == 0.
void dequantize_row(QuantType t, const void* src, float* dst, int64_t n);

// pagoda's own quantizer: n floats into n / block_elems blocks of type t, rounding to nearest on the format's
// grid. Each block's (and k-quant sub-block's) scale and min are chosen, after their fp16 / 6-bit rounding,
// so the grid spans every weight: the round-trip error is at most half a step (one step for Q4_0/Q5_0,
// whose grid is one code shorter on the positive side). Used for random-weight models stored quantized and
// by tests that write GGUF files. PRECOND as dequantize_row; src finite, scales within fp16 range.
void quantize_row(QuantType t, const float* src, void* dst, int64_t n);

}  // namespace pagoda
