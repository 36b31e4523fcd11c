// Private helpers of the kernels in src/pagoda/ops/cuda: aligned vector packs, warp and block reductions,
// dtype dispatch; the element conversions are core/cuda_convert.cuh's (shared with attention/). Included
// only by .cu files of this folder; not public API.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "pagoda/core/cuda_convert.cuh"
#include "pagoda/core/dtype.h"
#include "pagoda/core/error.h"
#include "pagoda/ops/cuda/device_buffer.h"

namespace pagoda::cuda_detail {

using bf16 = __nv_bfloat16;
using f16 = __half;

constexpr unsigned kFullMask = 0xffffffffu;

using cuda_convert::from_f32;
using cuda_convert::to_f32;

// ---- vector accesses ----
// N elements of T move as one access of kWords 32-bit words (N * sizeof(T) = 4, 8 or 16 bytes) and are
// converted to and from float in registers. The words are explicit integers (bf16/fp16 pairs converted
// with the x2 intrinsics): a struct of bf16 elements would be stored element by element.
// PRECOND: the address is aligned to N * sizeof(T) bytes.
template <typename T, int N>
constexpr int kWords = int(N * sizeof(T) / 4);

template <int W>
__device__ __forceinline__ void load_words(const void* p, uint32_t (&w)[W]) {
  static_assert(W == 1 || W == 2 || W == 4, "4, 8 or 16-byte accesses");
  if constexpr (W == 4) {
    const uint4 r = *static_cast<const uint4*>(p);
    w[0] = r.x, w[1] = r.y, w[2] = r.z, w[3] = r.w;
  } else if constexpr (W == 2) {
    const uint2 r = *static_cast<const uint2*>(p);
    w[0] = r.x, w[1] = r.y;
  } else {
    w[0] = *static_cast<const uint32_t*>(p);
  }
}

// Stores are written in PTX: NVVM split a plain uint4 store of converted values into four 4-byte stores
// (seen with nvcc 13.0). PRECOND: p points to global memory (cudaMalloc'd), as every op's data does.
template <int W>
__device__ __forceinline__ void store_words(void* p, const uint32_t (&w)[W]) {
  static_assert(W == 1 || W == 2 || W == 4, "4, 8 or 16-byte accesses");
  if constexpr (W == 4)
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
  else if constexpr (W == 2)
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
  else *static_cast<uint32_t*>(p) = w[0];
}

template <typename T, int N>
__device__ __forceinline__ void words_to_floats(const uint32_t (&w)[kWords<T, N>], float (&f)[N]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = __uint_as_float(w[i]);
  } else {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float2 t = cuda_convert::unpack2<T>(w[i]);
      f[2 * i] = t.x, f[2 * i + 1] = t.y;
    }
  }
}

// Rounds each float to T (nearest even).
template <typename T, int N>
__device__ __forceinline__ void floats_to_words(const float (&f)[N], uint32_t (&w)[kWords<T, N>]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = __float_as_uint(f[i]);
  } else {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) w[i] = cuda_convert::pack2<T>(f[2 * i], f[2 * i + 1]);
  }
}

template <typename T, int N>
__device__ __forceinline__ void load_floats(const T* p, float (&f)[N]) {
  uint32_t w[kWords<T, N>];
  load_words(p, w);
  words_to_floats<T, N>(w, f);
}

template <typename T, int N>
__device__ __forceinline__ void store_floats(T* p, const float (&f)[N]) {
  uint32_t w[kWords<T, N>];
  floats_to_words<T, N>(f, w);
  store_words(p, w);
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
