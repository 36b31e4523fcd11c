// PRIVATE to ops/cuda: the bit and conversion tools the two quantized GEMV kernels share
// (quant_gemv_kernel.cuh, quant_gemv_i8.cuh). Each runs on the device and, for the emulation tests, on
// the host.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#ifndef PAGODA_HD
#define PAGODA_HD __host__ __device__ __forceinline__
#endif

namespace pagoda::quant_gemv_detail {

PAGODA_HD int imin(int a, int b) { return a < b ? a : b; }

PAGODA_HD uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(a, b, s);
#else
  const uint64_t v = uint64_t(b) << 32 | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
#endif
}

// (hi:lo) >> sh, low 32 bits; sh in 0..31.
PAGODA_HD uint32_t funnel_right(uint32_t lo, uint32_t hi, uint32_t sh) {
#ifdef __CUDA_ARCH__
  return __funnelshift_r(lo, hi, sh);
#else
  return uint32_t(((uint64_t(hi) << 32) | lo) >> sh);
#endif
}

// T = __nv_bfloat16 or __half.
template <typename T>
PAGODA_HD float to_float(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return __half2float(v);
}
template <typename T>
PAGODA_HD T from_float(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return __float2half_rn(v);
}

}  // namespace pagoda::quant_gemv_detail
