// The device side of FLASHINFER's tensor-core attend kernels: the device Ops of flashinfer_cuda_mma.cuh, the
// kernel, and its launch for one query dtype and kernel kind (general or decode; flashinfer_cuda_mma_{bf16,f16}
// .cu and _{bf16,f16}_decode.cu instantiate it, 12 kernels each).
// PRIVATE to flashinfer/.
#pragma once

#include <cuda_runtime.h>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/attention/device_caps.h"
#include "pagoda/attention/device_common.cuh"
#include "pagoda/attention/flashinfer/flashinfer_cuda_mma.cuh"
#include "pagoda/attention/flashinfer/flashinfer_cuda_mma.h"
#include "pagoda/attention/mma_sm80.cuh"

namespace pagoda::fi_detail {

struct DeviceOps {
  template <typename P>
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    const uint32_t b[2] = {b0, b1};
    attention_device::mma16816<P>(c, a, b);
  }
  // c += A[16 x 32] B[32 x 8], e4m3 operands, float32 accumulation (SM 8.9+; the host never launches a kernel
  // using it on an older image: fi_fp8_mma_available()).
  static __device__ __forceinline__ void mma_e4m3(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
  }
  static __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint8_t* p) { attention_device::ldmatrix_x4(r, p); }
  static __device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const uint8_t* p) {
    attention_device::ldmatrix_x4_trans(r, p);
  }
  static __device__ __forceinline__ float shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
  static __device__ __forceinline__ void copy16(void* smem, const void* gmem) { attention_device::cp_async_16(smem, gmem); }
  static __device__ __forceinline__ void commit() { attention_device::cp_async_commit(); }
  template <int N>
  static __device__ __forceinline__ void wait() {
    attention_device::cp_async_wait<N>();
  }
  static __device__ __forceinline__ void sync_cta() { __syncthreads(); }
};

template <typename T, KvKind kKv, int HD, bool kQ8, bool kDecode>
__global__ void __launch_bounds__(kMmaThreads) fi_mma_kernel(FiCudaParams p) {
  attention_device::pdl_launch_dependents();  // the merge kernel may place its CTAs early (SM 9.0)
  extern __shared__ __align__(16) uint8_t smem[];
  fi_mma_cta<DeviceOps, T, kKv, HD, kQ8, kDecode>(p, int(blockIdx.x), int(blockIdx.y), int(threadIdx.x), smem);
}

// The most dynamic shared memory a CTA may opt into on the current device (99 KB on SM 8.6 / 8.9, 227 KB on SM
// 9.0): a kernel needing more is not launched there, and the SIMT kernel serves its shapes.
inline int smem_optin() { return attention_host::device_compute_capability().smem_block_optin; }

// The kernel, with its shared-memory limit raised once per process (a function attribute, not per launch).
template <typename T, KvKind kKv, int HD, bool kQ8, bool kDecode>
auto prepared_kernel() {
  static const bool attr_set = [] {
    PAGODA_CUDA_OK(cudaFuncSetAttribute(fi_mma_kernel<T, kKv, HD, kQ8, kDecode>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, MmaFmt<T, kKv, HD, kQ8, kDecode>::kSmem));
    return true;
  }();
  (void)attr_set;
  return fi_mma_kernel<T, kKv, HD, kQ8, kDecode>;
}

// false (nothing launched) where the kernel's shared memory does not fit the device.
template <typename T, KvKind kKv, int HD, bool kQ8, bool kDecode>
bool launch_mma(const FiCudaParams& p, cudaStream_t s) {
  constexpr int kSmem = MmaFmt<T, kKv, HD, kQ8, kDecode>::kSmem;
  if (kSmem > smem_optin()) return false;
  const auto kernel = prepared_kernel<T, kKv, HD, kQ8, kDecode>();
  const dim3 grid(unsigned(p.plan.num_tasks), unsigned(p.num_kv_heads));
  kernel<<<grid, kMmaThreads, kSmem, s>>>(p);
  PAGODA_CUDA_OK(cudaGetLastError());
  return true;
}

template <typename T, int HD, bool kDecode>
bool launch_mma_kv(const FiCudaParams& p, cudaStream_t s, bool q8) {
  switch (p.kv_dtype) {
    case DType::kF8E4M3:
      return q8 ? launch_mma<T, KvKind::kE4M3, HD, true, kDecode>(p, s) : launch_mma<T, KvKind::kE4M3, HD, false, kDecode>(p, s);
    case DType::kF8E5M2: return launch_mma<T, KvKind::kE5M2, HD, false, kDecode>(p, s);
    default: return launch_mma<T, KvKind::kSame, HD, false, kDecode>(p, s);
  }
}

template <typename T, KvKind kKv, int HD, bool kQ8, bool kDecode>
int resident_ctas() {
  if (MmaFmt<T, kKv, HD, kQ8, kDecode>::kSmem > smem_optin()) return 0;
  int n = 0;
  PAGODA_CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, prepared_kernel<T, kKv, HD, kQ8, kDecode>(), kMmaThreads,
                                                               MmaFmt<T, kKv, HD, kQ8, kDecode>::kSmem));
  return n;
}

template <typename T, int HD, bool kDecode>
int resident_ctas_kv(DType kv, bool q8) {
  switch (kv) {
    case DType::kF8E4M3:
      return q8 ? resident_ctas<T, KvKind::kE4M3, HD, true, kDecode>() : resident_ctas<T, KvKind::kE4M3, HD, false, kDecode>();
    case DType::kF8E5M2: return resident_ctas<T, KvKind::kE5M2, HD, false, kDecode>();
    default: return resident_ctas<T, KvKind::kSame, HD, false, kDecode>();
  }
}

// Attend CTAs resident per SM for the kernel a layer of this shape launches (0: the SIMT kernel serves it).
template <typename T, bool kDecode>
int mma_resident_ctas(DType kv, int head_size, bool q8) {
  switch (head_size) {
    case 64: return resident_ctas_kv<T, 64, kDecode>(kv, q8);
    case 128: return resident_ctas_kv<T, 128, kDecode>(kv, q8);
    case 256: return resident_ctas_kv<T, 256, kDecode>(kv, q8);
    default: return 0;
  }
}

// PRECOND for kDecode: p.plan.decode.
template <typename T, bool kDecode>
bool mma_attend(const FiCudaParams& p, cudaStream_t s) {
  const int64_t qstride = p.q_stride > 0 ? p.q_stride : int64_t(p.num_q_heads) * p.head_size;
  if (p.kv_dtype != p.dtype && dtype_size(p.kv_dtype) == 2) return false;  // the other 16-bit dtype: SIMT
  if (qstride % 8 != 0 || reinterpret_cast<uintptr_t>(p.q) % 16 != 0 || reinterpret_cast<uintptr_t>(p.kv_cache) % 16 != 0)
    return false;
  const bool q8 = p.quantize_q && p.kv_dtype == DType::kF8E4M3 && fi_fp8_mma_available();
  switch (p.head_size) {
    case 64: return launch_mma_kv<T, 64, kDecode>(p, s, q8);
    case 128: return launch_mma_kv<T, 128, kDecode>(p, s, q8);
    case 256: return launch_mma_kv<T, 256, kDecode>(p, s, q8);
    default: return false;
  }
}

}  // namespace pagoda::fi_detail
