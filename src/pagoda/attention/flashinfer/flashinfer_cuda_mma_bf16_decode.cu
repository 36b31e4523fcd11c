// FLASHINFER's tensor-core attend kernels for bfloat16 queries, the decode kernels (plans whose every task
// packs <= 16 rows), every cache dtype and head size.
#include "pagoda/attention/flashinfer/flashinfer_cuda_mma_launch.cuh"

namespace pagoda {

bool fi_mma_attend_bf16_decode(const FiCudaParams& p, cudaStream_t stream) {
  return fi_detail::mma_attend<__nv_bfloat16, true>(p, stream);
}

int fi_mma_resident_ctas_bf16_decode(DType kv_dtype, int head_size, bool fp8_queries) {
  return fi_detail::mma_resident_ctas<__nv_bfloat16, true>(kv_dtype, head_size, fp8_queries);
}

}  // namespace pagoda
