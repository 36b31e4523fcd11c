// The GGML block formats transcribed independently of src/pagoda/ops/quant (from the format descriptions:
// ggml-common.h's block structs and the dequantization formulas), in float64, and random blocks.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "pagoda/core/quant_type.h"

namespace pagoda::test {

inline double half_to_double(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v = exp == 0 ? std::ldexp(double(man), -24) : std::ldexp(double(1024 + man), exp - 25);
  return sign ? -v : v;
}

inline double half_at(const uint8_t* p) { return half_to_double(uint16_t(p[0] | (p[1] << 8))); }

// Bit `i` of a little-endian bit string.
inline int bit_at(const uint8_t* p, int i) { return (p[i / 8] >> (i % 8)) & 1; }

// Element t of a block: w = a[t] + c[t], a the scaled code, c the min term (0 for symmetric formats).
// Both exact in float64 for fp16 scales (products of at most 11 + 8 + 6 significant bits).
inline void ref_decode_block(QuantType type, const uint8_t* b, double* a, double* c) {
  switch (type) {
    case QuantType::kQ4_0:
    case QuantType::kQ4_1:
    case QuantType::kQ5_0:
    case QuantType::kQ5_1:
    case QuantType::kQ8_0: {
      const bool five = type == QuantType::kQ5_0 || type == QuantType::kQ5_1;
      const bool has_m = type == QuantType::kQ4_1 || type == QuantType::kQ5_1;
      const double d = half_at(b), m = has_m ? half_at(b + 2) : 0.0;
      const uint8_t* qh = b + (has_m ? 4 : 2);
      const uint8_t* qs = five ? qh + 4 : qh;
      for (int t = 0; t < 32; ++t) {
        int q;
        if (type == QuantType::kQ8_0) {
          q = int8_t(b[2 + t]);
        } else {
          q = t < 16 ? qs[t] % 16 : qs[t - 16] / 16;  // first half low nibbles, second half high
          if (five) q += 16 * bit_at(qh, t);
          if (!has_m) q -= five ? 16 : 8;
        }
        a[t] = d * q;
        c[t] = m;
      }
      return;
    }
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      const bool five = type == QuantType::kQ5_K;
      const double d = half_at(b), dmin = half_at(b + 2);
      const uint8_t* sc = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int s = 0; s < 8; ++s) {
        // 6-bit scale/min: sub-blocks 0-3 in the low 6 bits of bytes 0-3 / 4-7; sub-blocks 4-7 take their
        // low 4 bits from the nibbles of bytes 8-11 and their top 2 bits from the top of bytes 0-3 / 4-7.
        int scale, min;
        if (s < 4) {
          scale = sc[s] % 64;
          min = sc[s + 4] % 64;
        } else {
          scale = sc[s + 4] % 16 + 16 * (sc[s - 4] / 64);
          min = sc[s + 4] / 16 + 16 * (sc[s] / 64);
        }
        for (int l = 0; l < 32; ++l) {
          const int byte = 32 * (s / 2) + l;  // chunk of 64 = 32 bytes: even sub-block low nibble, odd high
          int q = s % 2 == 0 ? qs[byte] % 16 : qs[byte] / 16;
          if (five) q += 16 * ((qh[l] >> s) & 1);
          a[32 * s + l] = d * scale * q;
          c[32 * s + l] = -dmin * min;
        }
      }
      return;
    }
    case QuantType::kQ6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      const double d = half_at(b + 208);
      for (int t = 0; t < 256; ++t) {
        const int half = t / 128, r = (t % 128) / 32, l = t % 32;
        const int lowbyte = ql[64 * half + 32 * (r % 2) + l];
        const int low = r < 2 ? lowbyte % 16 : lowbyte / 16;
        const int high = (qh[32 * half + l] >> (2 * r)) % 4;
        a[t] = d * sc[t / 16] * (low + 16 * high - 32);
        c[t] = 0;
      }
      return;
    }
    case QuantType::kNone: return;
  }
}

// Formats whose weights carry a min term (w = a + c; the others are w = a, whose sign of zero follows d).
constexpr bool has_min(QuantType t) {
  return t == QuantType::kQ4_1 || t == QuantType::kQ5_1 || t == QuantType::kQ4_K || t == QuantType::kQ5_K;
}

// A random fp16 of exponent field <= 20 (|v| < 64, subnormals and zero included), random sign.
inline uint16_t random_half(std::mt19937_64& rng) {
  const uint16_t exp = uint16_t(rng() % 21), man = uint16_t(rng() % 1024), sign = uint16_t(rng() % 2);
  return uint16_t(sign << 15 | exp << 10 | man);
}

// n_blocks random blocks: random code bytes, random fp16 scales.
inline std::vector<uint8_t> random_blocks(QuantType t, int64_t n_blocks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int bb = quant_traits(t).block_bytes;
  std::vector<uint8_t> v(size_t(n_blocks * bb));
  for (auto& x : v) x = uint8_t(rng());
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* b = v.data() + i * bb;
    auto put = [&](int off) {
      const uint16_t h = random_half(rng);
      std::memcpy(b + off, &h, 2);
    };
    switch (t) {
      case QuantType::kQ4_0: case QuantType::kQ5_0: case QuantType::kQ8_0: put(0); break;
      case QuantType::kQ4_1: case QuantType::kQ5_1: case QuantType::kQ4_K: case QuantType::kQ5_K: put(0); put(2); break;
      case QuantType::kQ6_K: put(208); break;
      case QuantType::kNone: break;
    }
  }
  return v;
}

inline constexpr QuantType kAllQuantTypes[] = {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1,
                                               QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K};

}  // namespace pagoda::test
