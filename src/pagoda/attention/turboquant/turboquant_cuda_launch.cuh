// PRIVATE to turboquant/: the launch of the tensor-core TurboQuant kernel of one preset, included by the
// per-preset translation units (turboquant_cuda_<preset>.cu), which instantiate launch_tq_preset for their
// preset so that the presets compile in parallel.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/attention/turboquant/turboquant_cuda_cta.cuh"
#include "pagoda/attention/turboquant/turboquant_cuda_decode.cuh"
#include "pagoda/core/error.h"

namespace pagoda::tq_detail {

// Launches the kernel of the preset for D = a.head_size over grid (num_items, num_kv_heads): the decode body
// (turboquant_cuda_decode.cuh) when decode8 (every item has <= 8 rows), else the general one.
template <int KB, int VB, bool NC>
void launch_tq_preset(const KernelArgs& a, int num_items, bool decode8, cudaStream_t stream);
// CTAs of that kernel resident per SM of the current device.
template <int KB, int VB, bool NC>
int tq_preset_ctas_per_sm(int head_size, bool decode8);

// The kernel and its dynamic shared memory, the limit raised once per kernel.
template <int KB, int VB, bool NC, int D, bool kDecode>
auto configured_kernel() {
  auto kernel = kDecode ? tq_decode_kernel<KB, VB, NC, D> : tq_attention_kernel<KB, VB, NC, D>;
  constexpr int kBytes = kDecode ? DecodeFmt<KB, VB, NC, D>::kSmem : Fmt<KB, VB, NC, D>::kSmem;
  static bool configured = false;
  if (!configured) {
    PAGODA_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
    configured = true;
  }
  return std::pair{kernel, kBytes};
}

template <int KB, int VB, bool NC, int D>
int ctas_per_sm_d(bool decode8) {
  const auto [kernel, bytes] =
      decode8 ? configured_kernel<KB, VB, NC, D, true>() : configured_kernel<KB, VB, NC, D, false>();
  int n = 0;
  PAGODA_CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, bytes));
  return n;
}

template <int KB, int VB, bool NC, int D>
void launch_tq_d(const KernelArgs& a, int num_items, bool decode8, cudaStream_t stream) {
  const auto [kernel, bytes] =
      decode8 ? configured_kernel<KB, VB, NC, D, true>() : configured_kernel<KB, VB, NC, D, false>();
  kernel<<<dim3(unsigned(num_items), unsigned(a.num_kv_heads)), kThreads, bytes, stream>>>(a);
  PAGODA_CUDA_OK(cudaGetLastError());
}

#define PAGODA_TQ_INSTANTIATE(KB, VB, NC)                                                        \
  template <>                                                                                    \
  void launch_tq_preset<KB, VB, NC>(const KernelArgs& a, int num_items, bool decode8, cudaStream_t stream) { \
    switch (a.head_size) {                                                                       \
      case 64: return launch_tq_d<KB, VB, NC, 64>(a, num_items, decode8, stream);                       \
      case 128: return launch_tq_d<KB, VB, NC, 128>(a, num_items, decode8, stream);                       \
      case 256: return launch_tq_d<KB, VB, NC, 256>(a, num_items, decode8, stream);                       \
      default: break;                                                                            \
    }                                                                                            \
    PAGODA_CHECK(false, "TurboQuant tensor-core kernel: head size ", a.head_size, " not instantiated"); \
  }                                                                                              \
  template <>                                                                                    \
  int tq_preset_ctas_per_sm<KB, VB, NC>(int head_size, bool decode8) {                                         \
    switch (head_size) {                                                                         \
      case 64: return ctas_per_sm_d<KB, VB, NC, 64>(decode8);                                           \
      case 128: return ctas_per_sm_d<KB, VB, NC, 128>(decode8);                                         \
      case 256: return ctas_per_sm_d<KB, VB, NC, 256>(decode8);                                         \
      default: break;                                                                            \
    }                                                                                            \
    return 0;                                                                                    \
  }

}  // namespace pagoda::tq_detail
