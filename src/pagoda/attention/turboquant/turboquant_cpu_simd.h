// Vector helpers the TURBOQUANT CPU encode and attention share: GCC vector-extension types, the float32
// rotation (sign flip + chunked Walsh-Hadamard), fp16 / FP8 E4M3 conversions of the slot fields, and the
// unpacking of 8 codes at a time. PRIVATE to attention/turboquant/.
//
// Everything is always_inline so that it compiles inside the caller's target_clones("avx2", "default")
// versions; with -ffp-contract=off both versions round identically (no FMA contraction), so results do not
// depend on the machine.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "pagoda/core/turboquant.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TQ_CPU_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define TQ_CPU_MULTIVERSION
#endif
#define TQ_INLINE inline __attribute__((always_inline))

namespace pagoda::tq_cpu {

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));

TQ_INLINE v8f load8(const float* p) {
  v8f x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
TQ_INLINE void store8(float* p, v8f x) { std::memcpy(p, &x, sizeof x); }
// Lane k of the result: the sum of the 8 lanes of a[k] (8 horizontal sums in 7 adds and 14 shuffles).
TQ_INLINE v8f reduce8(const v8f* a) {
  v8f t[4], u[2];
  for (int k = 0; k < 4; ++k)
    t[k] = __builtin_shuffle(a[2 * k], a[2 * k + 1], v8i{0, 8, 2, 10, 4, 12, 6, 14}) +
           __builtin_shuffle(a[2 * k], a[2 * k + 1], v8i{1, 9, 3, 11, 5, 13, 7, 15});
  for (int k = 0; k < 2; ++k)
    u[k] = __builtin_shuffle(t[2 * k], t[2 * k + 1], v8i{0, 1, 8, 9, 4, 5, 12, 13}) +
           __builtin_shuffle(t[2 * k], t[2 * k + 1], v8i{2, 3, 10, 11, 6, 7, 14, 15});
  return __builtin_shuffle(u[0], u[1], v8i{0, 1, 2, 3, 8, 9, 10, 11}) +
         __builtin_shuffle(u[0], u[1], v8i{4, 5, 6, 7, 12, 13, 14, 15});
}
TQ_INLINE float hsum(v8f a) { return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])); }
TQ_INLINE uint32_t load_u32(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// fp16 bits -> float for every finite fp16 (the slots hold no Inf/NaN: the encoder saturates): the exponent
// and mantissa shifted into float position are the value times 2^-112, subnormals included.
TQ_INLINE float f16_field(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  uint32_t bits = uint32_t(h & 0x7fffu) << 13;
  float f;
  std::memcpy(&f, &bits, 4);
  f *= 0x1p112f;
  return (h & 0x8000u) ? -f : f;
}

// float -> FP8 E4M3, nearest even, saturating at +-448 (finite inputs). Same results as f32_to_f8e4m3.
TQ_INLINE uint8_t f32_to_e4m3_sat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x43e00000u) return sign | 0x7e;  // >= 448
  if (a < 0x3c800000u) {                     // < 2^-6: the subnormal grid, 2^-9 apart
    float m;
    std::memcpy(&m, &a, 4);
    return sign | uint8_t(std::nearbyint(m * 512.0f));  // exact scaling; 8 (= 2^-6) is code 0x08, the min normal
  }
  const uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;  // mantissa to 3 bits, ties to even
  return sign | uint8_t(r - (120u << 3));                      // rebias 127 -> 7; 448 at most (a < 448 rounds <= 448)
}

// 8 FP8 E4M3 bytes -> floats: exponent and mantissa shifted into float position are the value times 2^-120
// (subnormals included); NaN does not occur (the encoder saturates).
TQ_INLINE v8f e4m3x8(const uint8_t* p) {
  typedef uint64_t v4du __attribute__((vector_size(32)));
  uint64_t w;
  std::memcpy(&w, p, 8);
  v8u x = v8u(v4du{} + w);                                // the two 32-bit halves, alternating
  x = __builtin_shuffle(x, v8u{0, 0, 0, 0, 1, 1, 1, 1});  // byte k of the 8 in lane k's low bits after the shift
  x = (x >> v8u{0, 8, 16, 24, 0, 8, 16, 24}) & 0xffu;
  const v8u mag = (x & 0x7fu) << 20, sign = (x & 0x80u) << 24;
  v8f f;
  std::memcpy(&f, &mag, sizeof f);
  f *= 0x1p120f;
  v8u fb;
  std::memcpy(&fb, &f, sizeof fb);
  fb |= sign;
  std::memcpy(&f, &fb, sizeof f);
  return f;
}

// exp(x) of 8 floats x <= 0 (Cephes' expf: n = round(x log2 e), a degree-6 polynomial of the remainder, 2^n
// by the exponent field): within 2 ulp of exp; 0 below -87 (where exp(x) < 2^-125; -inf gives 0).
TQ_INLINE v8f exp8(v8f x0) {
  const v8f x = x0 < -87.0f ? v8f{} - 87.0f : x0;
  const v8f magic = v8f{} + 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to nearest integer
  const v8f n = (x * 1.44269504088896341f + magic) - magic;
  const v8f r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  v8f y = r * 1.9875691500E-4f + 1.3981999507E-3f;
  y = y * r + 8.3334519073E-3f;
  y = y * r + 4.1665795894E-2f;
  y = y * r + 1.6666665459E-1f;
  y = y * r + 5.0000001201E-1f;
  y = (y * (r * r) + r) + 1.0f;
  const v8i e = (__builtin_convertvector(n, v8i) + 127) << 23;  // n in [-126, 0]: a normal power of two
  v8f pow2;
  std::memcpy(&pow2, &e, sizeof pow2);
  return x0 < -87.0f ? v8f{} : y * pow2;
}

// Codes i .. i+7 of a b-bit little-endian stream as integers, i % 8 == 0. Reads 4 bytes at byte i * b / 8:
// within the slot, since at least 2 bytes (the norm or the value's scale) follow every code field.
template <int B>
TQ_INLINE v8i codes8(const uint8_t* field, int i) {
  static_assert(B == 3 || B == 4);
  const uint32_t w = load_u32(field + i * B / 8);
  const v8u shift = B == 4 ? v8u{0, 4, 8, 12, 16, 20, 24, 28} : v8u{0, 3, 6, 9, 12, 15, 18, 21};
  return v8i(((v8u{} + w) >> shift) & uint32_t((1 << B) - 1));
}
template <int B>
TQ_INLINE unsigned code_at(const uint8_t* field, int i) {
  const int bit = i * B;
  const unsigned two = unsigned(field[bit / 8]) | (bit % 8 + B > 8 ? unsigned(field[bit / 8 + 1]) << 8 : 0u);
  return (two >> (bit % 8)) & ((1u << B) - 1);
}

// Centroids of 8 codes: one permute for 8 centroids; for 16, a permute of each half by the low 3 bits and a
// blend on bit 3 (moved to the sign bit, which the blend reads).
template <int B>
TQ_INLINE v8f centroids8(v8i code, v8f lo, v8f hi) {
  if constexpr (B == 3) {
    return __builtin_shuffle(lo, code);
  } else {
    const v8i low = code & 7;
    const v8f a = __builtin_shuffle(lo, low), b = __builtin_shuffle(hi, low);
    return (code << 28) < 0 ? b : a;
  }
}

// The unnormalised Walsh-Hadamard transform (Sylvester order) of n = 2^k floats in place. Each output is
// a +-sum of the n inputs by a tree of depth k: |error| <= gamma_k sum |x_j| (the tests' margin).
TQ_INLINE void fwht(float* x, int n) {
  if (n < 8) {
    for (int h = 1; h < n; h *= 2)
      for (int i = 0; i < n; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const float a = x[j], b = x[j + h];
          x[j] = a + b;
          x[j + h] = a - b;
        }
    return;
  }
  // Strides 1, 2, 4 inside each group of 8 lanes: (a, b) -> (a + b, a - b) as t + s a, s = +-1 (exact
  // negation, then the one rounding of the scalar form).
  const v8f s1 = {1, -1, 1, -1, 1, -1, 1, -1}, s2 = {1, 1, -1, -1, 1, 1, -1, -1}, s4 = {1, 1, 1, 1, -1, -1, -1, -1};
  for (int i = 0; i < n; i += 8) {
    v8f a = load8(x + i);
    a = __builtin_shuffle(a, v8i{1, 0, 3, 2, 5, 4, 7, 6}) + a * s1;
    a = __builtin_shuffle(a, v8i{2, 3, 0, 1, 6, 7, 4, 5}) + a * s2;
    a = __builtin_shuffle(a, v8i{4, 5, 6, 7, 0, 1, 2, 3}) + a * s4;
    store8(x + i, a);
  }
  for (int h = 8; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; j += 8) {
        const v8f a = load8(x + j), b = load8(x + j + h);
        store8(x + j, a + b);
        store8(x + j + h, a - b);
      }
}

// out = per chunk c: fwht(s . x) * factor / sqrt(n_c), the layer's rotation times `factor` (sign_masks[i] is
// 0x80000000 where s_i = -1). The per-chunk multiplier is rounded to float once.
TQ_INLINE void rotate(const float* x, const uint32_t* sign_masks, int d, double factor, float* out) {
  for (int i = 0; i < d; ++i) {
    uint32_t b;
    std::memcpy(&b, x + i, 4);
    b ^= sign_masks[i];
    std::memcpy(out + i, &b, 4);
  }
  for (int c = 0, nc = turboquant_num_chunks(d); c < nc; ++c) {
    int begin, n;
    turboquant_chunk(d, c, &begin, &n);
    fwht(out + begin, n);
    const float f = float(factor / std::sqrt(double(n)));
    for (int i = begin; i < begin + n; ++i) out[i] *= f;
  }
}

}  // namespace pagoda::tq_cpu
