// FLASHINFER's tensor-core attend kernels (flashinfer_cuda_mma.cuh) as host entry points, one translation
// unit per query dtype and kernel kind. PRIVATE to flashinfer/.
#pragma once

#include <cuda_runtime_api.h>

#include "pagoda/attention/flashinfer/flashinfer_cuda.h"

namespace pagoda {

// Launches the tensor-core attend kernel over the uploaded plan, grid (tasks, KV heads); false when it does
// not take the configuration (head size not 64/128/256, unaligned query rows, more shared memory than the
// device allows a CTA), which the SIMT kernel then serves. FP8 queries when p.quantize_q, the cache is e4m3
// and the kernel was built for SM 8.9+. The _decode kernels serve plans with p.plan.decode (MmaFmt's kDecode),
// the others every plan.
bool fi_mma_attend_bf16(const FiCudaParams& p, cudaStream_t stream);
bool fi_mma_attend_f16(const FiCudaParams& p, cudaStream_t stream);
bool fi_mma_attend_bf16_decode(const FiCudaParams& p, cudaStream_t stream);
bool fi_mma_attend_f16_decode(const FiCudaParams& p, cudaStream_t stream);
// Tensor-core attend CTAs resident per SM on the current device for that configuration (0: not served).
int fi_mma_resident_ctas_bf16(DType kv_dtype, int head_size, bool fp8_queries);
int fi_mma_resident_ctas_f16(DType kv_dtype, int head_size, bool fp8_queries);
int fi_mma_resident_ctas_bf16_decode(DType kv_dtype, int head_size, bool fp8_queries);
int fi_mma_resident_ctas_f16_decode(DType kv_dtype, int head_size, bool fp8_queries);

}  // namespace pagoda
