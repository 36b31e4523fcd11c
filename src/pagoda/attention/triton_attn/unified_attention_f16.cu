// Instantiation of the TRITON_ATTN kernels for __half.
#include "pagoda/attention/triton_attn/unified_attention_launch.cuh"

namespace pagoda::triton_attn_detail {

template <>
bool launch_unified<__half>(const KernelArgs& args, int num_items, int num_splits, cudaStream_t stream) {
  return launch_unified_impl<__half>(args, num_items, num_splits, stream);
}

}  // namespace pagoda::triton_attn_detail
