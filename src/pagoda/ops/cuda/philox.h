// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the counter-based
// generator of Random123 and cuRAND, usable on the host and the device. The sampler draws the uniform for
// vocabulary entry i of a row from counter {i / 4, i >> 34, step, step >> 32} and key {seed, seed >> 32},
// word i % 4, so a request's samples depend only on (seed, step, logits), not on its batch.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PAGODA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define PAGODA_HOST_DEVICE inline
#endif

namespace pagoda {

struct Philox4 {
  uint32_t v[4];
};

PAGODA_HOST_DEVICE uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return uint32_t((uint64_t(a) * b) >> 32);
#endif
}

PAGODA_HOST_DEVICE Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = philox_mulhi(kM0, c.v[0]), lo0 = kM0 * c.v[0];
    const uint32_t hi1 = philox_mulhi(kM1, c.v[2]), lo1 = kM1 * c.v[2];
    c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// The four random words of vocabulary entries 4g .. 4g+3 of a row sampled with (seed, step).
PAGODA_HOST_DEVICE Philox4 sampler_random_words(uint64_t seed, uint64_t step, uint64_t group) {
  return philox4x32_10(Philox4{{uint32_t(group), uint32_t(group >> 32), uint32_t(step), uint32_t(step >> 32)}},
                       uint32_t(seed), uint32_t(seed >> 32));
}

// A word to a uniform in (0, 1): the top 23 bits, centred, (k + 0.5) * 2^-23, in [2^-24, 1 - 2^-24]. Never 0
// or 1: k + 0.5 needs 24 significant bits, all fp32 has (with 24 bits of k, 1 - 2^-25 would round to 1).
PAGODA_HOST_DEVICE float uniform_from_word(uint32_t w) { return (float(w >> 9) + 0.5f) * (1.0f / 8388608.0f); }

}  // namespace pagoda
