// Private to ops/quant (and its tests): the GGML block layouts decoded into integer codes and float
// scales. Every reader of a block goes through these, so the layouts are written down once:
//
//   Q4_0  [d f16][qs 16]            w = d * (q - 8),        q = 4 bits: element t < 16 low nibble of qs[t],
//                                                           element t >= 16 high nibble of qs[t - 16]
//   Q4_1  [d f16][m f16][qs 16]     w = d * q + m
//   Q5_0  [d f16][qh 4][qs 16]      w = d * (q - 16),       q = nibble as Q4_0 | bit t of qh (LE u32) << 4
//   Q5_1  [d f16][m f16][qh 4][qs 16]  w = d * q + m
//   Q8_0  [d f16][qs 32 int8]       w = d * q
//   Q4_K  [d f16][dmin f16][scales 12][qs 128]   8 sub-blocks of 32 with 6-bit scale sc and min mn:
//         w = (d * sc) * q - (dmin * mn); qs holds 4 chunks of 64 weights: 32 bytes, low nibbles are
//         sub-block 2c, high nibbles sub-block 2c + 1
//   Q5_K  [d f16][dmin f16][scales 12][qh 32][qs 128]   as Q4_K, q |= (bit s of qh[l]) << 4 for element
//         l of sub-block s
//   Q6_K  [ql 128][qh 64][scales 16 int8][d f16]   16 groups of 16 with int8 scale: w = (d * sc) * (q - 32);
//         two halves of 128: element l + 32 r (l < 32, r < 4) takes ql[l + 32 (r & 1)] (low nibble for
//         r < 2, high for r >= 2) and bits 2r..2r+1 of qh[l] as bits 4..5
#pragma once

#include <cstdint>
#include <cstring>

#include "pagoda/core/dtype.h"
#include "pagoda/core/quant_type.h"

namespace pagoda::quant {

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
inline void store_f16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// A 32-weight block of Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 as codes and scales: w[t] = d * q[t] (+ m).
// q is the signed value the scale multiplies (offset already removed: Q4_0 -8..7, Q5_0 -16..15).
struct Block32 {
  int8_t q[32];
  float d;
  float m;  // 0 for the types without a min
};

// 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's 12 packed bytes.
inline void k_scale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = uint8_t((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    *mn = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// A Q4_K / Q5_K block: w[32 s + l] = (d * sc[s]) * q[32 s + l] - (dmin * mn[s]); q in 0..15 (Q4_K) or 0..31.
struct BlockK {
  uint8_t q[256];
  uint8_t sc[8], mn[8];
  float d, dmin;
};

// A Q6_K block: w[16 g + l] = (d * sc[g]) * q[16 g + l], q in -32..31.
struct BlockQ6K {
  int8_t q[256];
  int8_t sc[16];
  float d;
};

void decode_block32(QuantType t, const uint8_t* blk, Block32* out);
void decode_q4_k(const uint8_t* blk, BlockK* out);
void decode_q5_k(const uint8_t* blk, BlockK* out);
void decode_q6_k(const uint8_t* blk, BlockQ6K* out);

}  // namespace pagoda::quant
