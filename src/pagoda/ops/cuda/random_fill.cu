#include "pagoda/ops/cuda/random_fill.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "pagoda/core/cuda_convert.cuh"
#include "pagoda/core/error.h"
#include "pagoda/ops/cuda/device_buffer.h"

namespace pagoda {
namespace {

__device__ __forceinline__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return uint32_t(x);
}

template <typename T>
__global__ void random_fill_kernel(T* out, int64_t n, uint64_t seed, float mean, float sd) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t base = (seed * 0x9E3779B97F4A7C15ull) ^ (uint64_t(i) * 4);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) s += float(mix(base + k)) * (1.0f / 4294967296.0f);
    float z = (s - 2.0f) * 1.7320508f;  // sum of 4 U(0,1): mean 2, variance 1/3
    float v = mean + sd * z;
    out[i] = cuda_convert::from_f32<T>(v);
  }
}

}  // namespace

void random_fill(const RandomFillParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  const int threads = 256;
  const int blocks = int(std::min<int64_t>((p.n + threads - 1) / threads, 65536));
  switch (p.dtype) {
    case DType::kF32: random_fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(p.data), p.n, p.seed, p.mean, p.std); break;
    case DType::kBF16: random_fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(p.data), p.n, p.seed, p.mean, p.std); break;
    case DType::kF16: random_fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<__half*>(p.data), p.n, p.seed, p.mean, p.std); break;
    case DType::kF8E4M3: case DType::kF8E5M2: case DType::kU8: case DType::kI32: case DType::kI64:
      PAGODA_CHECK(false, "random_fill: unsupported dtype ", dtype_name(p.dtype));
  }
  PAGODA_CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda
