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
// CTAs of that kernel resident per SM of the current device.
template <int KB, int VB, bool NC>
int tq_preset_ctas_per_sm(int head_size);

// Raises the kernel's dynamic shared-memory limit, once.
template <int KB, int VB, bool NC, int D>
void configure_tq_d() {
  static bool configured = false;
  if (!configured) {
    PAGODA_CUDA_OK(cudaFuncSetAttribute(tq_attention_kernel<KB, VB, NC, D>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, Fmt<KB, VB, NC, D>::kSmem));
    configured = true;
  }
}

template <int KB, int VB, bool NC, int D>
int ctas_per_sm_d() {
  configure_tq_d<KB, VB, NC, D>();
  int n = 0;
  PAGODA_CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, tq_attention_kernel<KB, VB, NC, D>, kThreads,
                                                               Fmt<KB, VB, NC, D>::kSmem));
  return n;
}

template <int KB, int VB, bool NC, int D>
void launch_tq_d(const KernelArgs& a, int num_items, cudaStream_t stream) {
  constexpr int kBytes = Fmt<KB, VB, NC, D>::kSmem;
  configure_tq_d<KB, VB, NC, D>();
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
  }                                                                                              \
  template <>                                                                                    \
  int tq_preset_ctas_per_sm<KB, VB, NC>(int head_size) {                                         \
    switch (head_size) {                                                                         \
      case 64: return ctas_per_sm_d<KB, VB, NC, 64>();                                           \
      case 128: return ctas_per_sm_d<KB, VB, NC, 128>();                                         \
      case 256: return ctas_per_sm_d<KB, VB, NC, 256>();                                         \
      default: break;                                                                            \
    }                                                                                            \
    return 0;                                                                                    \
  }

}  // namespace pagoda::tq_detail
