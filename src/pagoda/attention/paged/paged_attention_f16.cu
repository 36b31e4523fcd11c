// Instantiation of the paged-attention kernels for __half.
#include "pagoda/attention/paged/paged_attention_launch.cuh"

namespace pagoda::paged_detail {

template <>
bool launch_paged<__half>(const KernelArgs& args, int num_items, int num_splits, cudaStream_t stream) {
  return launch_paged_impl<__half>(args, num_items, num_splits, stream);
}

}  // namespace pagoda::paged_detail
