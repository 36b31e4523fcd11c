// FLASHINFER's tensor-core attend kernels for bfloat16 queries (every cache dtype and head size).
#include "pagoda/attention/flashinfer/flashinfer_cuda_mma_launch.cuh"

namespace pagoda {

bool fi_mma_attend_bf16(const FiCudaParams& p, cudaStream_t stream) { return fi_detail::mma_attend<__nv_bfloat16>(p, stream); }

}  // namespace pagoda
