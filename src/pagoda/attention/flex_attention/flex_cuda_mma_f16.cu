// FLEX_ATTENTION's tensor-core kernel for __half (head sizes 64, 128, 256).
#include "pagoda/attention/flex_attention/flex_cuda_mma.cuh"

namespace pagoda::flex_detail {

template <>
void launch_mma<__half>(const KernelArgs& a, dim3 grid, cudaStream_t stream) {
  mma::launch_mma_impl<__half>(a, grid, stream);
}

}  // namespace pagoda::flex_detail
