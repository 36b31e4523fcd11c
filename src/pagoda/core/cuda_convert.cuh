// Element conversions of the CUDA kernels, shared by ops/ and attention/ (both may include core/): float to
// and from fp32/bf16/fp16, two floats to and from a packed 16-bit pair, fp8 (e4m3/e5m2) to float or to a
// packed 16-bit type. Rounding down is to nearest even; widening is exact. (Rounding to fp8 is the KV-cache
// write's alone, in ops/cuda/rope_kv.cu.) Header-only device code, included by .cu/.cuh files alone: core/
// builds without CUDA, and nothing else in it includes a CUDA header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace pagoda::cuda_convert {

// ---- one element <-> float ----
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// ---- two elements <-> one 32-bit word (T = bf16 or fp16), element 0 in the low half ----
// pack2 makes an mma/wgmma A-fragment register, or two adjacent outputs stored as one word.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>);
  if constexpr (std::is_same_v<T, __half>) {
    __half2 v = __floats2half2_rn(lo, hi);
    uint32_t w;
    memcpy(&w, &v, 4);
    return w;
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t w;
    memcpy(&w, &v, 4);
    return w;
  }
}

template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t w) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>);
  if constexpr (std::is_same_v<T, __half>) {
    __half2 h;
    memcpy(&h, &w, 4);
    return __half22float2(h);
  } else {
    __nv_bfloat162 b;
    memcpy(&b, &w, 4);
    return __bfloat1622float2(b);
  }
}

// ---- fp8 ----
// One fp8 code of kKind to float (exact).
template <__nv_fp8_interpretation_t kKind>
__device__ __forceinline__ float fp8_to_f32(uint8_t bits) {
  if constexpr (kKind == __NV_E4M3) {
    __nv_fp8_e4m3 v;
    v.__x = bits;
    return float(v);
  } else {
    __nv_fp8_e5m2 v;
    v.__x = bits;
    return float(v);
  }
}

// 8 fp8 codes of kKind (8 bytes, element 0 in the lowest byte) to 8 elements of T, bf16 or fp16 (exact:
// every e4m3/e5m2 value is a bf16 and an fp16 value).
template <typename T, __nv_fp8_interpretation_t kKind>
__device__ __forceinline__ uint4 widen_fp8x8(uint2 v) {
  const __nv_fp8x2_storage_t* in = reinterpret_cast<const __nv_fp8x2_storage_t*>(&v);
  uint4 out;
  uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(in[i], kKind);
    if constexpr (std::is_same_v<T, __half>) {
      o[i] = *reinterpret_cast<uint32_t*>(&h);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<__half2*>(&h));
      o[i] = pack2<__nv_bfloat16>(f.x, f.y);
    }
  }
  return out;
}

}  // namespace pagoda::cuda_convert
