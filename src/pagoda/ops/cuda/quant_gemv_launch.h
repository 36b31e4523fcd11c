// PRIVATE to ops/cuda: the per-format launchers of quant_gemv(), defined in the family files
// (quant_gemv_legacy.cu: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; quant_gemv_kquants.cu: Q4_K, Q5_K, Q6_K) so the
// kernels compile in parallel.
#pragma once

#include <cuda_runtime_api.h>

#include "pagoda/core/quant_type.h"
#include "pagoda/ops/cuda/quant_gemv.h"

namespace pagoda::quant_gemv_detail {

// PRECOND: checked by quant_gemv(); p.dtype is kBF16 or kF16, p.m >= 1.
template <QuantType Q>
void launch_quant_gemv(const QuantGemvParams& p, cudaStream_t stream);

// The int8 kernel (quant_gemv_i8.cu). PRECOND: quant_gemv_i8_applies(p), checked by quant_gemv().
void launch_quant_gemv_i8(const QuantGemvParams& p, cudaStream_t stream);

}  // namespace pagoda::quant_gemv_detail
