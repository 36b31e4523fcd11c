// Bit tools of the CUDA kernels that also run on the host, for their emulation tests: the device intrinsic
// on the device, its definition in plain C++ on the host. Used by the quantized GEMV (ops/cuda) and the
// TurboQuant attention kernels (attention/turboquant).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pagoda::cuda_bits {

// __byte_perm: byte i of the result is byte (s >> 4i) & 7 of the pair (b:a).
__host__ __device__ __forceinline__ uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) {
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
__host__ __device__ __forceinline__ uint32_t funnel_right(uint32_t lo, uint32_t hi, uint32_t sh) {
#ifdef __CUDA_ARCH__
  return __funnelshift_r(lo, hi, sh);
#else
  return uint32_t(((uint64_t(hi) << 32) | lo) >> sh);
#endif
}

}  // namespace pagoda::cuda_bits
