// Private helpers of the kernels in src/pagoda/ops/cuda: element conversions, aligned vector packs,
// warp and block reductions, dtype dispatch. Included only by .cu files of this folder; not public API.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "pagoda/core/dtype.h"
#include "pagoda/core/error.h"
#include "pagoda/ops/cuda/device_buffer.h"

namespace pagoda::cuda_detail {

using bf16 = __nv_bfloat16;
using f16 = __half;

constexpr unsigned kFullMask = 0xffffffffu;

// ---- element <-> float (round to nearest even on the way down) ----
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(f16 v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ f16 from_f32<f16>(float v) { return __float2half_rn(v); }

// N elements of T loaded or stored as one access of sizeof(T) * N bytes (4, 8 or 16).
// PRECOND: the address is aligned to sizeof(Pack).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, N>*>(p);
}
template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& v) {
  *reinterpret_cast<Pack<T, N>*>(p) = v;
}

// Elements per 16-byte access.
template <typename T>
constexpr int kVec16 = int(16 / sizeof(T));

// ---- reductions ----
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    uint64_t w = __shfl_xor_sync(kFullMask, v, o);
    v = w > v ? w : v;
  }
  return v;
}

// Sum over the block, returned to every thread. The summation order is fixed (deterministic).
// PRECOND: blockDim.x is a multiple of 32; every thread of the block calls it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < nwarps ? partial[lane] : 0.f);
}

// Largest non-NaN value over the block (-inf when there is none), returned to every thread.
__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < nwarps ? partial[lane] : -INFINITY;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

__device__ __forceinline__ uint64_t block_max_u64(uint64_t v) {
  __shared__ uint64_t partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max_u64(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_max_u64(lane < nwarps ? partial[lane] : 0);
}

__device__ __forceinline__ unsigned long long block_sum_u64(unsigned long long v) {
  __shared__ unsigned long long partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < nwarps ? partial[lane] : 0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// A float mapped to an unsigned key with the same order (-inf < ... < -0 < +0 < ... < +inf); NaN maps
// above +inf, so the maximum key is the first NaN, as torch.argmax has it.
__device__ __forceinline__ uint32_t ordered_key(float v) {
  if (v != v) return 0xffffffffu;
  uint32_t u = __float_as_uint(v + 0.0f);  // -0 -> +0: they compare equal
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_to_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// (value, index) packed so that the larger u64 is the larger value and, among equal values, the lower index.
__device__ __forceinline__ uint64_t pack_value_index(float v, uint32_t index) {
  return (uint64_t(ordered_key(v)) << 32) | uint64_t(0xffffffffu - index);
}
__device__ __forceinline__ uint32_t packed_index(uint64_t p) { return 0xffffffffu - uint32_t(p & 0xffffffffu); }
__device__ __forceinline__ float packed_value(uint64_t p) { return key_to_float(uint32_t(p >> 32)); }

// ---- host side ----
inline bool is_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

inline unsigned ceil_div(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

// Calls f(T{}) with T = float, bf16 or f16 for the model dtypes; other dtypes are a caller bug.
template <typename F>
void dispatch_model_dtype(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::kF32: f(float{}); return;
    case DType::kBF16: f(bf16{}); return;
    case DType::kF16: f(f16{}); return;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kU8:
    case DType::kI32:
    case DType::kI64: break;
  }
  PAGODA_CHECK(false, op, ": unsupported dtype ", dtype_name(t), " (float32, bfloat16 or float16)");
}

}  // namespace pagoda::cuda_detail
