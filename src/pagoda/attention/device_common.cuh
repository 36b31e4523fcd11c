// PRIVATE to attention/: device helpers the TRITON_ATTN and FLASH_ATTN kernels share (shared-memory
// addresses, 16-byte cp.async, float -> element conversions, fp8 widening).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace pagoda::attention_device {

// Shared-memory address of a generic pointer into shared memory (for PTX operands).
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16-byte asynchronous copy global -> shared (L2 only).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(smem)), "l"(gmem));
}
// The same, copying only the first src_bytes (0 or 16) and zero-filling the rest: rows past the end of a
// sequence land as zeros without a branch.
__device__ __forceinline__ void cp_async_16_zfill(uint32_t smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes) : "memory");
}

// Two floats rounded to a packed pair of T (bf16 or fp16), low half first: an mma/wgmma A-fragment register.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>);
  if constexpr (std::is_same_v<T, __half>) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// One float rounded to T (round to nearest even).
template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }

// Programmatic dependent launch (SM 9.0; no-ops elsewhere). A kernel calls pdl_launch_dependents() to let
// the next kernel of the stream, when that one is launched with programmatic stream serialization, place
// its CTAs before this grid ends; that kernel calls pdl_wait_for_prior_grid() before reading what this grid
// wrote (it returns once this grid has completed and its memory is visible).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// 8 fp8 values (8 bytes) to 8 elements of T, bf16 or fp16 (exact: every e4m3/e5m2 value is a bf16 and an
// fp16 value).
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

}  // namespace pagoda::attention_device
