// PRIVATE to quant_gemv_kernel.cuh: one block of each GGML format as mma k-steps and scale groups. The
// layouts (core/quant_type.h, ggml-common.h):
//   Q4_0 [d][qs 16]  Q4_1 [d][m][qs 16]  Q5_0 [d][qh 4][qs 16]  Q5_1 [d][m][qh 4][qs 16]  Q8_0 [d][qs 32]:
//        weight l < 16 is qs[l]'s low nibble (Q8_0: byte l), weight 16 + l its high nibble (Q8_0: byte
//        16 + l); Q5 adds bit l of qh as bit 4.
//   Q4_K [d][dmin][scales 12][qs 128], Q5_K [d][dmin][scales 12][qh 32][qs 128]: 4 chunks of 64 weights;
//        chunk c's 32 bytes hold sub-block 2c in the low nibbles, 2c + 1 in the high; Q5_K's bit 4 of
//        sub-block s weight l is bit s of qh[l].
//   Q6_K [ql 128][qh 64][int8 scales 16][d]: two halves of 128; in half h, weight 32 r + l (r < 4, l < 32)
//        is the low (r < 2) or high nibble of ql[64 h + l + 32 (r & 1)] with bits 2r, 2r + 1 of
//        qh[32 h + l] as bits 4, 5, scaled by scales[8 h + 2 r + l / 16].
// Lane (g, t) reads, of each 32-byte run of codes, the words at bytes 4 t and 16 + 4 t: the codes of 8
// weights per row, k = 4 t .. 4 t + 3 and 16 + 4 t .. 16 + 4 t + 3 of the run's 32 (or 16) weights.
#pragma once

namespace pagoda {
namespace quant_gemv_detail {

// Q5_0/Q5_1's bit 4 of the pair of weights (0, 2) or (1, 3) of v's low 4 bits (bit i = weight i), at the
// high-bit place of code_pair's halves (bits 4 and 20, in T's units), with kMagic<T>: one multiply spreads
// both bits.
template <typename T>
PAGODA_HD uint32_t q5_high02(uint32_t v) {
  constexpr int s = kShift<T>;
  return and_or((v & 5u) * ((1u << (4 + s)) | (1u << (18 + s))), 0x00100010u << s, kMagic<T>);
}
template <typename T>
PAGODA_HD uint32_t q5_high13(uint32_t v) {
  constexpr int s = kShift<T>;
  return and_or((v & 10u) * ((1u << (3 + s)) | (1u << (17 + s))), 0x00100010u << s, kMagic<T>);
}

// Q8_0: the high nibble of a byte of q + 128 is the stored high nibble with its top bit flipped.
// One LOP3: bits of the field pass through, its top bit inverted, the magic bits set (f = b ? a ^ c : c).
template <typename T, int S>
PAGODA_HD uint32_t code_pair_flip(uint32_t w) {
  const uint32_t a = shift_right<S - kShift<T>>(w), b = 0x000F000Fu << kShift<T>;
  const uint32_t c = (0x00080008u << kShift<T>) | kMagic<T>;
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  return (b & (a ^ c)) | (~b & c);
#endif
}

// Q8_0's block: q = 16 uh + ul - 128 with the nibbles uh, ul of q + 128; S_hi, S_lo their mma sums over the
// same k, so sum q x = 16 S_hi + S_lo - 2304 X.
template <class Ops, typename T, int NT>
PAGODA_HD void q8_block(Lane<T, NT>& L, const uint32_t (&lo)[2][4], const uint32_t (&hi)[2][4],
                                         const float (&d)[2]) {
  const uint32_t ones[4] = {kOnes<T>, kOnes<T>, kOnes<T>, kOnes<T>};
PAGODA_UNROLL
  for (int i = 0; i < Lane<T, NT>::kTiles; ++i) {
    {
      float sl[4] = {0.f, 0.f, 0.f, 0.f}, sh[4] = {0.f, 0.f, 0.f, 0.f}, xs[4] = {0.f, 0.f, 0.f, 0.f};
PAGODA_UNROLL
      for (int j = 0; j < 2; ++j) {
        uint32_t b0, b1;
        load_b<Ops>(L.x[i] + L.k0 + 16 * j, b0, b1);
        Ops::template mma<T>(sl, lo[j], b0, b1);
        Ops::template mma<T>(sh, hi[j], b0, b1);
        Ops::template mma<T>(xs, ones, b0, b1);
      }
      float* acc = L.acc[i];
PAGODA_UNROLL
      for (int e = 0; e < 4; ++e) {
        if (Lane<T, NT>::kOne && (e & 1)) continue;  // token 1 of a one-token lane: not kept
        const float s = fmaf(16.f, sh[e], sl[e]);
        acc[e] = fmaf(d[e >> 1], s, fmaf(-2304.f * d[e >> 1], xs[e & 1], acc[e]));
      }
    }
  }
}

template <QuantType Q, typename T, int NT, class Ops>
PAGODA_HD void block_dot(Lane<T, NT>& L, const uint8_t* p, const uint8_t* q, int t) {
  constexpr bool A4 = Fmt<Q>::kAligned4;
  if constexpr (Q == QuantType::kQ4_0 || Q == QuantType::kQ4_1 || Q == QuantType::kQ5_0 || Q == QuantType::kQ5_1) {
    constexpr bool kMin = Q == QuantType::kQ4_1 || Q == QuantType::kQ5_1;
    constexpr bool kQ5 = Q == QuantType::kQ5_0 || Q == QuantType::kQ5_1;
    constexpr int kQh = kMin ? 4 : 2;               // byte offset of qh (Q5) or qs (Q4)
    constexpr int kQs = kQ5 ? kQh + 4 : kQh;
    const uint32_t wg = ld32<A4>(p + kQs + 4 * t), wh = ld32<A4>(q + kQs + 4 * t);
    uint32_t a[2][4];
    if constexpr (kQ5) {
      const uint32_t vg = ld32<A4>(p + kQh) >> (4 * t), vh = ld32<A4>(q + kQh) >> (4 * t);
      frag<T, 0>(a[0], wg, wh, q5_high02<T>(vg), q5_high02<T>(vh), q5_high13<T>(vg), q5_high13<T>(vh));
      frag<T, 4>(a[1], wg, wh, q5_high02<T>(vg >> 16), q5_high02<T>(vh >> 16), q5_high13<T>(vg >> 16),
                 q5_high13<T>(vh >> 16));
    } else {
      frag<T, 0>(a[0], wg, wh);
      frag<T, 4>(a[1], wg, wh);
    }
    const float dg = ld_half(p), dh = ld_half(q);
    const float alpha[2] = {dg, dh};
    float beta[2];
    if constexpr (kMin) {  // w = d q + m: d (S - 128 X) + m X
      beta[0] = fmaf(-128.f, dg, ld_half(p + 2));
      beta[1] = fmaf(-128.f, dh, ld_half(q + 2));
    } else {  // w = d (q - 8) or d (q - 16): d (S - 136 X) or d (S - 144 X)
      constexpr float kOff = kQ5 ? -144.f : -136.f;
      beta[0] = kOff * dg;
      beta[1] = kOff * dh;
    }
    const int xoff[2] = {0, 16};
    group<Ops, T, NT, 2>(L, a, xoff, alpha, beta);
  } else if constexpr (Q == QuantType::kQ8_0) {
    uint32_t lo[2][4], hi[2][4];
PAGODA_UNROLL
    for (int j = 0; j < 2; ++j) {
      const uint32_t wg = ld32<A4>(p + 2 + 16 * j + 4 * t), wh = ld32<A4>(q + 2 + 16 * j + 4 * t);
      frag<T, 0>(lo[j], wg, wh);
      hi[j][0] = code_pair_flip<T, 4>(wg);
      hi[j][1] = code_pair_flip<T, 4>(wh);
      hi[j][2] = code_pair_flip<T, 12>(wg);
      hi[j][3] = code_pair_flip<T, 12>(wh);
    }
    const float d[2] = {ld_half(p), ld_half(q)};
    q8_block<Ops>(L, lo, hi, d);
  } else if constexpr (Q == QuantType::kQ4_K || Q == QuantType::kQ5_K) {
    constexpr bool kQ5 = Q == QuantType::kQ5_K;
    constexpr int kQs = kQ5 ? 48 : 16;
    // m = 1 (kOne): B's 8 columns are the block's 8 sub-blocks instead of 8 tokens (kColumns, quant_gemv_kernel.cuh).
    constexpr bool kOne = Lane<T, NT>::kOne;
    const uint32_t ones[4] = {kOnes<T>, kOnes<T>, kOnes<T>, kOnes<T>};
    // kOne: S and X of the even and the odd sub-blocks (two accumulators: two chains of mma half as long)
    float cs[2][4] = {}, cx[2][4] = {};
    uint32_t xb[2][2] = {{0, 0}, {0, 0}};                              // kOne: x of sub-block g (the lane's column)
    if constexpr (kOne) {
PAGODA_UNROLL
      for (int h = 0; h < 2; ++h) load_b<Ops>(L.x[0] + L.k0 + 32 * L.g + 16 * h, xb[h][0], xb[h][1]);
    }
    // The 6-bit scales and mins of the 8 sub-blocks, one per byte: sc[0..3], sc[4..7], mn[0..3], mn[4..7].
    uint32_t sc_lo[2], sc_hi[2], mn_lo[2], mn_hi[2], h0[2] = {0, 0}, h1[2] = {0, 0};
    float d[2], nd23[2], ndmin[2], dmin23[2];  // d, -2^23 d, -dmin, 2^23 dmin
    const uint8_t* rows[2] = {p, q};
PAGODA_UNROLL
    for (int r = 0; r < 2; ++r) {
      const uint32_t s0 = ld32<true>(rows[r] + 4), s1 = ld32<true>(rows[r] + 8), s2 = ld32<true>(rows[r] + 12);
      sc_lo[r] = s0 & 0x3f3f3f3fu;
      mn_lo[r] = s1 & 0x3f3f3f3fu;
      sc_hi[r] = (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
      mn_hi[r] = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
      d[r] = ld_half(rows[r]);
      nd23[r] = -8388608.f * d[r];
      const float dmin = ld_half(rows[r] + 2);
      ndmin[r] = -dmin;
      dmin23[r] = 8388608.f * dmin;
      if constexpr (kQ5) {
        h0[r] = ld32<true>(rows[r] + 16 + 4 * t);
        h1[r] = ld32<true>(rows[r] + 32 + 4 * t);
      }
    }
PAGODA_UNROLL
    for (int c = 0; c < 4; ++c) {
      const uint32_t w0g = ld32<true>(p + kQs + 32 * c + 4 * t), w0h = ld32<true>(q + kQs + 32 * c + 4 * t);
      const uint32_t w1g = ld32<true>(p + kQs + 32 * c + 16 + 4 * t), w1h = ld32<true>(q + kQs + 32 * c + 16 + 4 * t);
PAGODA_UNROLL
      for (int half = 0; half < 2; ++half) {  // sub-block 2c (low nibbles), 2c + 1 (high nibbles)
        const int sb = 2 * c + half;
        uint32_t a[2][4];
        if constexpr (kQ5) {
          // bit sb of qh bytes l, as code_pair's high bits (h >> sb puts them at each byte's bit 0)
          uint32_t hm[2][2][2];  // [word 0/1][row][pattern 02/13]
PAGODA_UNROLL
          for (int r = 0; r < 2; ++r) {
            const uint32_t x0 = (r ? h0[1] : h0[0]) >> sb, x1 = (r ? h1[1] : h1[0]) >> sb;
            hm[0][r][0] = high_bits<T, 0, 0, 0x00100010u>(x0);
            hm[0][r][1] = high_bits<T, 0, 1, 0x00100010u>(x0);
            hm[1][r][0] = high_bits<T, 0, 0, 0x00100010u>(x1);
            hm[1][r][1] = high_bits<T, 0, 1, 0x00100010u>(x1);
          }
          if (half == 0) {
            frag<T, 0>(a[0], w0g, w0h, hm[0][0][0], hm[0][1][0], hm[0][0][1], hm[0][1][1]);
            frag<T, 0>(a[1], w1g, w1h, hm[1][0][0], hm[1][1][0], hm[1][0][1], hm[1][1][1]);
          } else {
            frag<T, 4>(a[0], w0g, w0h, hm[0][0][0], hm[0][1][0], hm[0][0][1], hm[0][1][1]);
            frag<T, 4>(a[1], w1g, w1h, hm[1][0][0], hm[1][1][0], hm[1][0][1], hm[1][1][1]);
          }
        } else if (half == 0) {
          frag<T, 0>(a[0], w0g, w0h);
          frag<T, 0>(a[1], w1g, w1h);
        } else {
          frag<T, 4>(a[0], w0g, w0h);
          frag<T, 4>(a[1], w1g, w1h);
        }
        if constexpr (kOne) {
          // Column sb of B holds x in the lanes of group g = sb, zeros elsewhere.
          const bool mine = L.g == sb;
PAGODA_UNROLL
          for (int h = 0; h < 2; ++h) {
            const uint32_t b0 = mine ? xb[h][0] : 0u, b1 = mine ? xb[h][1] : 0u;
            Ops::template mma<T>(cs[half], a[h], b0, b1);
            Ops::template mma<T>(cx[half], ones, b0, b1);
          }
        } else {
        float alpha[2], beta[2];
PAGODA_UNROLL
        for (int r = 0; r < 2; ++r) {
          const uint32_t scw = sb < 4 ? sc_lo[r] : sc_hi[r], mnw = sb < 4 ? mn_lo[r] : mn_hi[r];
          float sc, mn;  // 2^23 + the 6-bit value
          switch (sb & 3) {  // compile-time after unrolling
            case 0: sc = byte_raw<0>(scw, L.magic), mn = byte_raw<0>(mnw, L.magic); break;
            case 1: sc = byte_raw<1>(scw, L.magic), mn = byte_raw<1>(mnw, L.magic); break;
            case 2: sc = byte_raw<2>(scw, L.magic), mn = byte_raw<2>(mnw, L.magic); break;
            default: sc = byte_raw<3>(scw, L.magic), mn = byte_raw<3>(mnw, L.magic); break;
          }
          // w = (d sc) q - dmin mn: alpha (S - 128 X) - dmin mn X. Each FMA is exact: d (2^23 + sc) - 2^23 d
          // = d sc has 17 significant bits.
          alpha[r] = fmaf(d[r], sc, nd23[r]);
          beta[r] = fmaf(-128.f, alpha[r], fmaf(ndmin[r], mn, dmin23[r]));
        }
        const int xoff[2] = {64 * c + 32 * half, 64 * c + 32 * half + 16};
        group<Ops, T, NT, 2>(L, a, xoff, alpha, beta);
        }
      }
    }
    if constexpr (kOne) {
      // alpha, beta of sub-blocks 2t + u (u = 0, 1) of rows g, g + 8, as the other kernels compute them.
      float alpha[2][2], beta[2][2];  // [u][row]
      const uint32_t sel = 0x7440u | uint32_t(2 * (t & 1));
PAGODA_UNROLL
      for (int r = 0; r < 2; ++r) {
        const uint32_t scw = t < 2 ? sc_lo[r] : sc_hi[r], mnw = t < 2 ? mn_lo[r] : mn_hi[r];
PAGODA_UNROLL
        for (int u = 0; u < 2; ++u) {
          const float sc = byte_raw_at(scw, L.magic, sel + u), mn = byte_raw_at(mnw, L.magic, sel + u);
          alpha[u][r] = fmaf(d[r], sc, nd23[r]);
          beta[u][r] = fmaf(-128.f, alpha[u][r], fmaf(ndmin[r], mn, dmin23[r]));
        }
      }
      // The sum runs through the group's 4 lanes in sub-block order, each adding its two as the other
      // kernels add every group (acc = alpha S + (beta X + acc)): step i takes the sum from lane i - 1
      // (lane 3: the last block's), and lane i's result is the sum through sub-block 2 i + 1.
      float a0 = L.acc[0][0], a1 = L.acc[0][2];
      const int base = L.g * 4;
PAGODA_UNROLL
      for (int i = 0; i < 4; ++i) {
        a0 = Ops::shfl(a0, base + ((i + 3) & 3));
        a1 = Ops::shfl(a1, base + ((i + 3) & 3));
        a0 = fmaf(alpha[0][0], cs[0][0], fmaf(beta[0][0], cx[0][0], a0));
        a0 = fmaf(alpha[1][0], cs[1][1], fmaf(beta[1][0], cx[1][1], a0));
        a1 = fmaf(alpha[0][1], cs[0][2], fmaf(beta[0][1], cx[0][0], a1));
        a1 = fmaf(alpha[1][1], cs[1][3], fmaf(beta[1][1], cx[1][1], a1));
      }
      L.acc[0][0] = a0;
      L.acc[0][2] = a1;
    }
  } else if constexpr (Q == QuantType::kQ6_K) {
    // alpha = d sc from the flipped byte sc + 128: d (2^23 + sc + 128) - 2^23 d - 128 d, each step exact.
    const float d[2] = {ld_half(p + 208), ld_half(q + 208)};
    const float nd23[2] = {-8388608.f * d[0], -8388608.f * d[1]};
PAGODA_UNROLL
    for (int h = 0; h < 2; ++h) {
      uint32_t ql[4][2], qh[2][2], sc[2][2];
      const uint8_t* rows[2] = {p, q};
PAGODA_UNROLL
      for (int r = 0; r < 2; ++r) {
PAGODA_UNROLL
        for (int i = 0; i < 4; ++i) ql[i][r] = ld32<A4>(rows[r] + 64 * h + 16 * i + 4 * t);
        qh[0][r] = ld32<A4>(rows[r] + 128 + 32 * h + 4 * t);
        qh[1][r] = ld32<A4>(rows[r] + 128 + 32 * h + 16 + 4 * t);
        // int8 scales, sign bit flipped: byte_raw gives 2^23 + sc + 128
        sc[0][r] = ld32<A4>(rows[r] + 192 + 8 * h) ^ 0x80808080u;
        sc[1][r] = ld32<A4>(rows[r] + 196 + 8 * h) ^ 0x80808080u;
      }
      // Group u (0..7) of 16 weights: k = 128 h + 16 u; codes from ql[(u & 1) + 2 ((u >> 1) & 1)], low
      // nibbles for u < 4, and bits 2 (u >> 1), 2 (u >> 1) + 1 of qh[u & 1]; scale byte u.
PAGODA_UNROLL
      for (int u = 0; u < 8; ++u) {
        const int li = (u & 1) + 2 * ((u >> 1) & 1), hi = u & 1;
        uint32_t a[1][4];
        float alpha[2], beta[2];
#define PAGODA_Q6_GROUP(U, SHIFT, BITS)                                                                      \
  frag<T, SHIFT>(a[0], ql[li][0], ql[li][1], high_bits<T, BITS, 0, 0x00300030u>(qh[hi][0]),                  \
                 high_bits<T, BITS, 0, 0x00300030u>(qh[hi][1]), high_bits<T, BITS, 1, 0x00300030u>(qh[hi][0]), \
                 high_bits<T, BITS, 1, 0x00300030u>(qh[hi][1]));                                             \
  for (int r = 0; r < 2; ++r) alpha[r] = fmaf(-128.f, d[r], fmaf(d[r], byte_raw<(U) & 3>(sc[(U) >> 2][r], L.magic), nd23[r]))
        switch (u) {  // compile-time after unrolling
          case 0: PAGODA_Q6_GROUP(0, 0, 0); break;
          case 1: PAGODA_Q6_GROUP(1, 0, 0); break;
          case 2: PAGODA_Q6_GROUP(2, 0, 2); break;
          case 3: PAGODA_Q6_GROUP(3, 0, 2); break;
          case 4: PAGODA_Q6_GROUP(4, 4, 4); break;
          case 5: PAGODA_Q6_GROUP(5, 4, 4); break;
          case 6: PAGODA_Q6_GROUP(6, 4, 6); break;
          default: PAGODA_Q6_GROUP(7, 4, 6); break;
        }
#undef PAGODA_Q6_GROUP
        // w = (d sc) (q - 32): alpha (S - 160 X)
        beta[0] = -160.f * alpha[0];
        beta[1] = -160.f * alpha[1];
        const int xoff[1] = {128 * h + 16 * u};
        group<Ops, T, NT, 1>(L, a, xoff, alpha, beta);
      }
    }
  }
}

}  // namespace quant_gemv_detail
}  // namespace pagoda
