// PRIVATE to turboquant/: the launch of the tensor-core TurboQuant kernel of one preset, included by the
// per-preset translation units (turboquant_cuda_<preset>.cu), which instantiate launch_tq_preset for their
// preset so that the presets compile in parallel.
#pragma once

#include <cuda_runtime_api.h>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/attention/turboquant/turboquant_cuda_kernel.cuh"
#include "pagoda/core/error.h"

namespace pagoda::tq_detail {

// Launches tq_attention_kernel<KB, VB, NC, D> over grid (num_items, num_kv_heads) for D = a.head_size.
template <int KB, int VB, bool NC>
void launch_tq_preset(const KernelArgs& a, int num_items, cudaStream_t stream);

template <int KB, int VB, bool NC, int D>
void launch_tq_d(const KernelArgs& a, int num_items, cudaStream_t stream) {
  constexpr int kBytes = Fmt<KB, VB, NC, D>::kSmem;
  static bool configured = false;  // the dynamic shared-memory limit is raised once per kernel
  if (!configured) {
    PAGODA_CUDA_OK(cudaFuncSetAttribute(tq_attention_kernel<KB, VB, NC, D>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
    configured = true;
  }
  tq_attention_kernel<KB, VB, NC, D><<<dim3(unsigned(num_items), unsigned(a.num_kv_heads)), kThreads, kBytes, stream>>>(a);
  PAGODA_CUDA_OK(cudaGetLastError());
}

#define PAGODA_TQ_INSTANTIATE(KB, VB, NC)                                                        \
  template <>                                                                                    \
  void launch_tq_preset<KB, VB, NC>(const KernelArgs& a, int num_items, cudaStream_t stream) {   \
    switch (a.head_size) {                                                                       \
      case 64: return launch_tq_d<KB, VB, NC, 64>(a, num_items, stream);                         \
      case 128: return launch_tq_d<KB, VB, NC, 128>(a, num_items, stream);                       \
      case 256: return launch_tq_d<KB, VB, NC, 256>(a, num_items, stream);                       \
      default: break;                                                                            \
    }                                                                                            \
    PAGODA_CHECK(false, "TurboQuant tensor-core kernel: head size ", a.head_size, " not instantiated"); \
  }

}  // namespace pagoda::tq_detail
