// The one-token int8-activation GEMV of quant_gemv.h (quant_gemv_i8.cuh): the kernels of every format and
// their launch.
#include <algorithm>

#include "pagoda/core/error.h"
#include "pagoda/core/quant_visit.h"
#include "pagoda/ops/cuda/cuda_common.cuh"
#include "pagoda/ops/cuda/quant_gemv_i8.cuh"
#include "pagoda/ops/cuda/quant_gemv_launch.h"

namespace pagoda::quant_gemv_i8_detail {
namespace {

// grid.x CTAs of kThreads threads, dynamic shared memory Smem<Q>::bytes(k).
template <QuantType Q, typename T>
__global__ void __launch_bounds__(kThreads, 4)
    quant_gemv_i8_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, const T* __restrict__ bias,
                         T* __restrict__ y, int n, int k) {
  extern __shared__ __align__(16) uint8_t smem[];
  gemv_i8_cta<Q, T, DeviceOps>(x, w, bias, y, n, k, int(blockIdx.x), int(gridDim.x), int(threadIdx.x), smem);
}

// The device's SM count and shared memory per SM (the current device when first asked).
struct DeviceShape {
  int sms = 0, smem_per_sm = 0, major = 0;
};
const DeviceShape& device_shape() {
  static const DeviceShape d = [] {
    DeviceShape s;
    int dev = 0;
    PAGODA_CUDA_CHECK(cudaGetDevice(&dev));
    PAGODA_CUDA_CHECK(cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, dev));
    PAGODA_CUDA_CHECK(cudaDeviceGetAttribute(&s.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    PAGODA_CUDA_CHECK(cudaDeviceGetAttribute(&s.major, cudaDevAttrComputeCapabilityMajor, dev));
    return s;
  }();
  return d;
}

// As many CTAs as are resident at once (each quantizes x once and then loops over rows; at most 4 an SM, the
// launch bound, fewer where the shared memory of a large k runs out), or one per 8 rows when there are fewer.
template <QuantType Q, typename T>
void launch_typed(const QuantGemvParams& p, cudaStream_t stream) {
  const size_t smem = Smem<Q>::bytes(p.k);
  static const bool attr_set = [] {
    PAGODA_CUDA_CHECK(cudaFuncSetAttribute(quant_gemv_i8_kernel<Q, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(Smem<Q>::bytes(kMaxK))));
    return true;
  }();
  (void)attr_set;
  const DeviceShape& d = device_shape();
  const int per_sm = std::clamp(int(size_t(d.smem_per_sm) / (smem + 1024)), 1, 4);  // 1 KiB: the system's share
  const int ctas = std::min(d.sms * per_sm, int(cuda_detail::ceil_div(p.n, kWarps)));
  // Programmatic stream serialization on SM 9.0 (see the kernel's griddepcontrol.wait).
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(ctas));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (d.major >= 9) {
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  PAGODA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, quant_gemv_i8_kernel<Q, T>, static_cast<const T*>(p.x),
                                       static_cast<const uint8_t*>(p.w), static_cast<const T*>(p.bias),
                                       static_cast<T*>(p.y), p.n, p.k));
}

template <QuantType Q>
void launch(const QuantGemvParams& p, cudaStream_t stream) {
  if (p.dtype == DType::kBF16) launch_typed<Q, __nv_bfloat16>(p, stream);
  else launch_typed<Q, __half>(p, stream);
}

}  // namespace
}  // namespace pagoda::quant_gemv_i8_detail

namespace pagoda {

bool quant_gemv_i8_applies(const QuantGemvParams& p) {
  // Q6_K rows are 16-byte aligned, and its 8-block rounds whole, where k % 2048 == 0; the others' where
  // k % 256 == 0.
  const bool format = p.type != QuantType::kNone && (p.type != QuantType::kQ6_K || p.k % 2048 == 0);
  return format && p.m == 1 && !p.batch_invariant && p.ctas == 0 && p.stages == 0 && p.k % 256 == 0 &&
         p.k <= quant_gemv_i8_detail::kMaxK && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
}

namespace quant_gemv_detail {
void launch_quant_gemv_i8(const QuantGemvParams& p, cudaStream_t stream) {
  visit_quant_type(p.type, [&](auto q) { quant_gemv_i8_detail::launch<decltype(q)::value>(p, stream); });
}
}  // namespace quant_gemv_detail

}  // namespace pagoda
