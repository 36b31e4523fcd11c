// Instantiation of the paged-attention kernels for __nv_bfloat16.
#include "pagoda/attention/paged/paged_attention_launch.cuh"

namespace pagoda::paged_detail {

template <>
bool launch_paged<__nv_bfloat16>(const KernelArgs& args, int num_items, int num_splits, cudaStream_t stream) {
  return launch_paged_impl<__nv_bfloat16>(args, num_items, num_splits, stream);
}

}  // namespace pagoda::paged_detail
