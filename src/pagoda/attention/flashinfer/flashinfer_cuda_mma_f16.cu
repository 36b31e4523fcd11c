// FLASHINFER's tensor-core attend kernels for float16 queries, the general kernels (every plan), every cache
// dtype and head size.
#include "pagoda/attention/flashinfer/flashinfer_cuda_mma_launch.cuh"

namespace pagoda {

bool fi_mma_attend_f16(const FiCudaParams& p, cudaStream_t stream) {
  return fi_detail::mma_attend<__half, false>(p, stream);
}

int fi_mma_resident_ctas_f16(DType kv_dtype, int head_size, bool fp8_queries) {
  return fi_detail::mma_resident_ctas<__half, false>(kv_dtype, head_size, fp8_queries);
}

}  // namespace pagoda
