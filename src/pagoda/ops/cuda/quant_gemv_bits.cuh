// PRIVATE to ops/cuda: the bit and conversion tools the two quantized GEMV kernels share
// (quant_gemv_kernel.cuh, quant_gemv_i8.cuh). Each runs on the device and, for the emulation tests, on
// the host.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "pagoda/core/cuda_bits.cuh"

#ifndef PAGODA_HD
#define PAGODA_HD __host__ __device__ __forceinline__
#endif

namespace pagoda::quant_gemv_detail {

PAGODA_HD int imin(int a, int b) { return a < b ? a : b; }

using cuda_bits::byte_perm;
using cuda_bits::funnel_right;

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
